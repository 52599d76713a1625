//go:build cilium_1_18

// The pool resource as Cilium 1.18 builds it: resource.New takes no
// workqueue metrics provider yet.
package main

import (
	"github.com/cilium/hive/cell"

	cilium_api_v2 "github.com/cilium/cilium/pkg/k8s/apis/cilium.io/v2"
	"github.com/cilium/cilium/pkg/k8s/client"
	"github.com/cilium/cilium/pkg/k8s/resource"
	"github.com/cilium/cilium/pkg/k8s/utils"
)

func poolResource(lc cell.Lifecycle, cs client.Clientset) (resource.Resource[*cilium_api_v2.CiliumLoadBalancerIPPool], error) {
	if !cs.IsEnabled() {
		return nil, nil
	}
	lw := utils.ListerWatcherFromTyped[*cilium_api_v2.CiliumLoadBalancerIPPoolList](
		cs.CiliumV2().CiliumLoadBalancerIPPools())
	return resource.New[*cilium_api_v2.CiliumLoadBalancerIPPool](
		lc, lw, resource.WithMetric("CiliumLoadBalancerIPPool")), nil
}
