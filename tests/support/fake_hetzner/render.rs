//! A server as Hetzner's API documentation shows it: the full JSON object of
//! about 2.4 KB, so pages weigh what real ones do.

use super::*;
use serde_json::json;

// ---------------------------------------------------------------------------
// Rendering: a server object shaped and sized like Hetzner's.

pub(super) struct Location {
    id: i64,
    name: &'static str,
    description: &'static str,
    country: &'static str,
    city: &'static str,
    latitude: f64,
    longitude: f64,
    network_zone: &'static str,
}

pub(super) const LOCATIONS: [Location; 3] = [
    Location {
        id: 1,
        name: "fsn1",
        description: "Falkenstein DC Park 1",
        country: "DE",
        city: "Falkenstein",
        latitude: 50.47612,
        longitude: 12.370071,
        network_zone: "eu-central",
    },
    Location {
        id: 2,
        name: "nbg1",
        description: "Nuremberg DC Park 1",
        country: "DE",
        city: "Nuremberg",
        latitude: 49.452102,
        longitude: 11.076665,
        network_zone: "eu-central",
    },
    Location {
        id: 3,
        name: "hel1",
        description: "Helsinki DC Park 1",
        country: "FI",
        city: "Helsinki",
        latitude: 60.169855,
        longitude: 24.938379,
        network_zone: "eu-central",
    },
];

/// A Location object as `/locations` and a server's `location` show it.
pub(super) fn render_location(location: &Location) -> serde_json::Value {
    json!({
        "id": location.id,
        "name": location.name,
        "description": location.description,
        "country": location.country,
        "city": location.city,
        "latitude": location.latitude,
        "longitude": location.longitude,
        "network_zone": location.network_zone,
    })
}

/// Today's shape (since Hetzner removed `datacenter` from servers on
/// 2026-07-01): the server's `location`, and its type's `locations`.
pub(super) fn render_server(server: &FakeServer) -> String {
    let id = server.id;
    let n = id.unsigned_abs();
    let here = &LOCATIONS[usize::try_from(n % 3).unwrap_or(0)];
    let location = here.name;
    let location_object = render_location(here);
    let ipv4 = server.ipv4.as_ref().map(|ip| {
        json!({
            "id": 40_000_000 + id,
            "ip": ip,
            "blocked": server.blocked,
            "dns_ptr": format!("static.{ip}.clients.your-server.de"),
        })
    });
    let ipv6 = server.ipv6.as_ref().map(|network| {
        let prefix = network.split('/').next().unwrap_or_default();
        json!({
            "id": 50_000_000 + id,
            "ip": network,
            "blocked": false,
            "dns_ptr": [{"ip": format!("{prefix}1"), "dns_ptr": format!("{}.example.com", server.name)}],
        })
    });
    let private_net: Vec<serde_json::Value> = server
        .private_net
        .iter()
        .map(|net| {
            json!({
                "network": net.network,
                "ip": net.ip,
                "alias_ips": net.alias_ips,
                "mac_address": format!("86:00:00:{:02x}:{:02x}:{:02x}", (n >> 16) & 0xff, (n >> 8) & 0xff, n & 0xff),
            })
        })
        .collect();
    json!({
        "id": id,
        "name": server.name,
        "status": server.status,
        "created": "2024-03-18T09:21:44+00:00",
        "public_net": {
            "ipv4": ipv4,
            "ipv6": ipv6,
            "floating_ips": [],
            "firewalls": [{"id": 1_200_042, "status": "applied"}],
        },
        "private_net": private_net,
        "server_type": {
            "id": 22,
            "name": "cpx31",
            "description": "CPX 31",
            "cores": 4,
            "memory": 8.0,
            "disk": 160,
            "deprecated": false,
            "prices": [{
                "location": location,
                "price_hourly": {"net": "0.0238000000", "gross": "0.0283220000000000"},
                "price_monthly": {"net": "14.8600000000", "gross": "17.6834000000000000"},
                "included_traffic": 21_990_232_555_520_u64,
                "price_per_tb_traffic": {"net": "1.0000000000", "gross": "1.1900000000000000"},
            }],
            "storage_type": "local",
            "cpu_type": "shared",
            "architecture": "x86",
            "deprecation": null,
            "locations": LOCATIONS
                .iter()
                .map(|l| json!({"id": l.id, "name": l.name, "deprecation": null,
                    "available": true, "recommended": true}))
                .collect::<Vec<_>>(),
        },
        "location": location_object,
        "image": {
            "id": 161_547_269,
            "type": "system",
            "status": "available",
            "name": "ubuntu-24.04",
            "description": "Ubuntu 24.04",
            "image_size": null,
            "disk_size": 5,
            "created": "2024-04-25T09:39:35+00:00",
            "created_from": null,
            "bound_to": null,
            "os_flavor": "ubuntu",
            "os_version": "24.04",
            "rapid_deploy": true,
            "protection": {"delete": false},
            "deprecated": null,
            "deleted": null,
            "labels": {},
            "architecture": "x86",
        },
        "iso": null,
        "rescue_enabled": false,
        "locked": false,
        "backup_window": null,
        "outgoing_traffic": 123_456_789 + n,
        "ingoing_traffic": 987_654_321 + n,
        "included_traffic": 21_990_232_555_520_u64,
        "protection": {"delete": false, "rebuild": false},
        "labels": server.labels,
        "volumes": [],
        "load_balancers": [],
        "primary_disk_size": 160,
        "placement_group": null,
    })
    .to_string()
}

/// A Floating IP as the API documentation shows it.
pub(super) fn render_floating_ip(fip: &FakeFloatingIp) -> serde_json::Value {
    let v6 = fip.ip.contains(':');
    json!({
        "id": fip.id,
        "name": format!("fip-{}", fip.id),
        "description": "",
        "ip": fip.ip,
        "type": if v6 { "ipv6" } else { "ipv4" },
        "server": fip.server,
        "dns_ptr": [{"ip": fip.ip.split('/').next().unwrap_or_default(), "dns_ptr": "fip.example.com"}],
        "home_location": {
            "id": 1, "name": "fsn1", "description": "Falkenstein DC Park 1", "country": "DE",
            "city": "Falkenstein", "latitude": 50.47612, "longitude": 12.370071,
            "network_zone": "eu-central"
        },
        "blocked": false,
        "protection": {"delete": false},
        "labels": fip.labels,
        "created": "2024-03-18T09:21:44+00:00",
    })
}

/// A private network as the API documentation shows it.
pub(super) fn render_network(id: i64, name: &str) -> serde_json::Value {
    json!({
        "id": id,
        "name": name,
        "ip_range": "10.0.0.0/8",
        "subnets": [{"type": "cloud", "ip_range": "10.0.0.0/16", "network_zone": "eu-central",
                     "gateway": "10.0.0.1", "vswitch_id": null}],
        "routes": [],
        "servers": [],
        "load_balancers": [],
        "protection": {"delete": false},
        "labels": {},
        "created": "2024-03-18T09:21:44+00:00",
        "expose_routes_to_vswitch": false,
    })
}
