module orbitmq.local/k8s-testbed-helm-unittest

go 1.26.0

require github.com/helm-unittest/helm-unittest v1.1.2
