//! canada-kaktus: keeps a CiliumLoadBalancerIPPool equal to the public IPv4s
//! of the Hetzner Cloud servers that match a label selector.
#![forbid(unsafe_code)]
