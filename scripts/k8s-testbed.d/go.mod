// Wrapper module that pins every tool the orbitmq Kubernetes test bed builds from source.
// scripts/k8s-testbed builds the `tool` packages below with `go build`; go.sum pins every byte.
//
// k8s.io/kubernetes is not meant to be consumed as a library: its go.mod requires the
// staging repositories (k8s.io/api, k8s.io/client-go, ...) at v0.0.0 and replaces them with
// ./staging/src/... paths that only exist inside its own repository. The replace block at
// the end maps each of them to the published v0.37.1 tag that matches Kubernetes v1.37.1.
// helm and kwok are built in this same module so that client-go, apimachinery, api etc. are
// compiled once for all tools (on 2 cores that saves several minutes of a cold build).
//
// To move to another Kubernetes version: update the pins in scripts/k8s-testbed.d/versions.env,
// then run `scripts/k8s-testbed pin`, which regenerates this file and go.sum.

module orbitmq.local/k8s-testbed-tools

go 1.26.0

require (
	helm.sh/helm/v3 v3.22.0
	k8s.io/kubernetes v1.37.1
	sigs.k8s.io/kwok v0.8.0
)

tool (
	helm.sh/helm/v3/cmd/helm
	k8s.io/kubernetes/cmd/kube-apiserver
	k8s.io/kubernetes/cmd/kube-controller-manager
	k8s.io/kubernetes/cmd/kube-scheduler
	k8s.io/kubernetes/cmd/kubectl
	sigs.k8s.io/kwok/cmd/kwok
	sigs.k8s.io/kwok/cmd/kwokctl
)

replace (
	k8s.io/api => k8s.io/api v0.37.1
	k8s.io/apiextensions-apiserver => k8s.io/apiextensions-apiserver v0.37.1
	k8s.io/apimachinery => k8s.io/apimachinery v0.37.1
	k8s.io/apiserver => k8s.io/apiserver v0.37.1
	k8s.io/cli-runtime => k8s.io/cli-runtime v0.37.1
	k8s.io/client-go => k8s.io/client-go v0.37.1
	k8s.io/cloud-provider => k8s.io/cloud-provider v0.37.1
	k8s.io/cluster-bootstrap => k8s.io/cluster-bootstrap v0.37.1
	k8s.io/code-generator => k8s.io/code-generator v0.37.1
	k8s.io/component-base => k8s.io/component-base v0.37.1
	k8s.io/component-helpers => k8s.io/component-helpers v0.37.1
	k8s.io/controller-manager => k8s.io/controller-manager v0.37.1
	k8s.io/cri-api => k8s.io/cri-api v0.37.1
	k8s.io/cri-client => k8s.io/cri-client v0.37.1
	k8s.io/cri-streaming => k8s.io/cri-streaming v0.37.1
	k8s.io/csi-translation-lib => k8s.io/csi-translation-lib v0.37.1
	k8s.io/dynamic-resource-allocation => k8s.io/dynamic-resource-allocation v0.37.1
	k8s.io/endpointslice => k8s.io/endpointslice v0.37.1
	k8s.io/externaljwt => k8s.io/externaljwt v0.37.1
	k8s.io/kms => k8s.io/kms v0.37.1
	k8s.io/kube-aggregator => k8s.io/kube-aggregator v0.37.1
	k8s.io/kube-controller-manager => k8s.io/kube-controller-manager v0.37.1
	k8s.io/kube-proxy => k8s.io/kube-proxy v0.37.1
	k8s.io/kube-scheduler => k8s.io/kube-scheduler v0.37.1
	k8s.io/kubectl => k8s.io/kubectl v0.37.1
	k8s.io/kubelet => k8s.io/kubelet v0.37.1
	k8s.io/metrics => k8s.io/metrics v0.37.1
	k8s.io/mount-utils => k8s.io/mount-utils v0.37.1
	k8s.io/pod-security-admission => k8s.io/pod-security-admission v0.37.1
	k8s.io/sample-apiserver => k8s.io/sample-apiserver v0.37.1
	k8s.io/streaming => k8s.io/streaming v0.37.1
)
