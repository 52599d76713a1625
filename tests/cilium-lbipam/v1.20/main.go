// Cilium's own LB IPAM (the lbipam cell of cilium-operator) as a small
// program of its own, for the end-to-end tests: it watches
// CiliumLoadBalancerIPPools and LoadBalancer Services on the API server named
// by --k8s-kubeconfig-path and assigns addresses exactly as the operator
// does. scripts/cilium-bins.sh builds it against the pinned Cilium release.
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
	"k8s.io/client-go/util/workqueue"

	"github.com/cilium/cilium/operator/pkg/lbipam"
	"github.com/cilium/cilium/pkg/hive"
	"github.com/cilium/cilium/pkg/k8s"
	cilium_api_v2 "github.com/cilium/cilium/pkg/k8s/apis/cilium.io/v2"
	"github.com/cilium/cilium/pkg/k8s/client"
	"github.com/cilium/cilium/pkg/k8s/resource"
	"github.com/cilium/cilium/pkg/k8s/utils"
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

func poolResource(lc cell.Lifecycle, cs client.Clientset, mp workqueue.MetricsProvider) (resource.Resource[*cilium_api_v2.CiliumLoadBalancerIPPool], error) {
	if !cs.IsEnabled() {
		return nil, nil
	}
	lw := utils.ListerWatcherFromTyped[*cilium_api_v2.CiliumLoadBalancerIPPoolList](
		cs.CiliumV2().CiliumLoadBalancerIPPools())
	return resource.New[*cilium_api_v2.CiliumLoadBalancerIPPool](
		lc, lw, mp, resource.WithMetric("CiliumLoadBalancerIPPool")), nil
}
