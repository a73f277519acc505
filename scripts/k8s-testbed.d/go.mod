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
