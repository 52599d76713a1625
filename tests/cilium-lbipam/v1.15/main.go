// Cilium's own LB IPAM as Cilium 1.15 runs it (the lbipam cell of
// cilium-operator, cilium.io/v2alpha1 pools), for the end-to-end tests. Same
// job as ../v1.20/main.go: it watches CiliumLoadBalancerIPPools and
// LoadBalancer Services on the API server named by --k8s-kubeconfig-path and
// assigns addresses exactly as that operator release does. Cilium 1.15's
// hive lives in its own tree (pkg/hive) and logs through logrus, so the
// wiring differs from the newer harness; the cells are the operator's.
package main

import (
	"os"

	"github.com/sirupsen/logrus"
	"github.com/spf13/pflag"

	"github.com/cilium/cilium/operator/pkg/lbipam"
	"github.com/cilium/cilium/pkg/hive"
	"github.com/cilium/cilium/pkg/hive/cell"
	"github.com/cilium/cilium/pkg/hive/job"
	"github.com/cilium/cilium/pkg/k8s"
	cilium_api_v2alpha1 "github.com/cilium/cilium/pkg/k8s/apis/cilium.io/v2alpha1"
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
		job.Cell,
		client.Cell,
		cell.Config(k8s.DefaultConfig),
		cell.Provide(
			k8s.ServiceResource,
			poolResource,
			func() *option.DaemonConfig { return option.Config },
		),
		lbipam.Cell,
	)
	h.RegisterFlags(pflag.CommandLine)
	pflag.Parse()
	if err := h.Run(); err != nil {
		logrus.WithError(err).Error("LB IPAM stopped")
		os.Exit(1)
	}
}

func poolResource(lc cell.Lifecycle, cs client.Clientset) (resource.Resource[*cilium_api_v2alpha1.CiliumLoadBalancerIPPool], error) {
	if !cs.IsEnabled() {
		return nil, nil
	}
	lw := utils.ListerWatcherFromTyped[*cilium_api_v2alpha1.CiliumLoadBalancerIPPoolList](
		cs.CiliumV2alpha1().CiliumLoadBalancerIPPools())
	return resource.New[*cilium_api_v2alpha1.CiliumLoadBalancerIPPool](
		lc, lw, resource.WithMetric("CiliumLoadBalancerIPPool")), nil
}
