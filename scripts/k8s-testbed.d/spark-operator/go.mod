module orbitmq.local/k8s-testbed-spark-operator

go 1.26.0

require github.com/kubeflow/spark-operator/v2 v2.3.0
