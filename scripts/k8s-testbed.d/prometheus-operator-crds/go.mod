module orbitmq.local/k8s-testbed-prometheus-operator-crds

go 1.26.0

require github.com/prometheus-operator/prometheus-operator v0.85.0
