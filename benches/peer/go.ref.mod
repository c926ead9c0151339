module ctrlq.invalid/benches/peer

go 1.24

require (
	github.com/go-logr/logr v1.2.3 // indirect
	golang.org/x/time v0.3.0 // indirect
	k8s.io/apimachinery v0.26.15 // indirect
	k8s.io/client-go v0.26.15 // indirect
	k8s.io/klog/v2 v2.80.1 // indirect
	k8s.io/utils v0.0.0-20221107191617-1a15be271d1d // indirect
)
