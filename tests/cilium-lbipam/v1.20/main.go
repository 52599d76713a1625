// Cilium's own LB IPAM (the lbipam cell of cilium-operator) as a small
// program of its own, for the end-to-end tests: it watches
// CiliumLoadBalancerIPPools and LoadBalancer Services on the API server named
// by --k8s-kubeconfig-path and assigns addresses exactly as the operator
// does. scripts/cilium-bins.sh builds it against each pinned Cilium release
// from 1.18 on (1.18 with the build tag cilium_1_18, see pool_resource_1_18.go).
//
// The operator's own constructor for the pool resource lives in a package
// that needs modules the Go proxy does not serve, so the pool resource is
// built here the same way (a typed lister-watcher over the clientset).
package main

import (
	"log/slog"
	"os"

	"github.com/cilium/hive/cell"
	"github.com/spf13/pflag"

	"github.com/cilium/cilium/operator/pkg/lbipam"
	"github.com/cilium/cilium/pkg/hive"
	"github.com/cilium/cilium/pkg/k8s"
	"github.com/cilium/cilium/pkg/k8s/client"
	"github.com/cilium/cilium/pkg/option"
)

func main() {
	// Both address families, as a dual-stack cluster runs the operator.
	option.Config.EnableIPv4 = true
	option.Config.EnableIPv6 = true
	h := hive.New(
		client.Cell,
		cell.Config(k8s.DefaultConfig),
		cell.Provide(
			k8s.DefaultServiceWatchConfig,
			k8s.ServiceResource,
			poolResource,
			func() *option.DaemonConfig { return option.Config },
		),
		lbipam.Cell,
	)
	h.RegisterFlags(pflag.CommandLine)
	pflag.Parse()
	if err := h.Run(slog.Default()); err != nil {
		slog.Error("LB IPAM stopped", "error", err)
		os.Exit(1)
	}
}
