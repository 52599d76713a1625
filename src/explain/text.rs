//! An explanation as people read it (`text`) and as JSON (`json`).

use super::{Explanation, Line};

impl Explanation {
    /// The answer for people.
    pub fn text(&self) -> String {
        let mut out = String::new();
        if let Some(address) = &self.address {
            out.push_str(&format!("address {address}\n"));
        }
        for pool in &self.pools {
            out.push_str(&format!(
                "pool {}: {} address(es)\n",
                pool.pool, pool.addresses
            ));
            if let Some(refused) = &pool.refused {
                out.push_str(&format!(
                    "  not written ({}): {}\n",
                    refused.guard, refused.message
                ));
            }
            for server in &pool.servers {
                let robot = if server.robot { "robot " } else { "" };
                out.push_str(&format!(
                    "  server {} ({robot}{})\n",
                    server.name, server.id
                ));
                for line in &server.lines {
                    out.push_str(&format!("    {}\n", shown(line)));
                }
            }
            for line in &pool.floating_ips {
                out.push_str(&format!("  {}\n", shown(line)));
            }
            for line in &pool.leaving {
                out.push_str(&format!("  {}\n", shown(line)));
            }
        }
        out
    }

    pub fn json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|_| "{}".to_owned()) + "\n"
    }
}

fn shown(line: &Line) -> String {
    let what = match (line.kind, &line.address) {
        (Some(kind), Some(address)) => format!("{kind} {address}"),
        (Some(kind), None) => kind.to_owned(),
        (None, Some(address)) => address.clone(),
        (None, None) => "server".to_owned(),
    };
    let state = if line.inside { "in" } else { "out" };
    format!("{what}: {state} ({}): {}", line.reason, line.detail)
}
