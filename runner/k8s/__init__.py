"""Kubernetes: manifests for the spark-operator (render), their offline check, the pod entry."""
