//! Safety guards: pure decisions that stand between a Hetzner listing and a
//! write. Removing an address from the pool takes a LoadBalancer IP away from
//! a running Service, so when in doubt these refuse to write.

use crate::pool::DesiredPool;

/// Why a write was refused. The live pool is left exactly as it was.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error(
        "no usable server: Hetzner returned {matched} server(s) for the label selector \
         ({skipped} without a public IPv4); refusing to write an empty pool, which would \
         take every LoadBalancer IP away"
    )]
    EmptyPool { matched: usize, skipped: usize },
}

impl Refusal {
    pub fn metric_label(&self) -> &'static str {
        match self {
            Refusal::EmptyPool { .. } => "empty_pool",
        }
    }
}

/// Checks a desired pool built from a complete listing. (A failed or partial
/// listing never reaches this point: the Hetzner client returns all pages or
/// an error.)
pub fn check(desired: &DesiredPool, matched: usize, skipped: usize) -> Result<(), Refusal> {
    if desired.addresses.is_empty() {
        return Err(Refusal::EmptyPool { matched, skipped });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pool::{render, PoolTemplate};

    #[test]
    fn an_empty_pool_is_refused_and_says_why() {
        let desired = render(&PoolTemplate::default(), []);
        let refusal = check(&desired, 2, 2).unwrap_err();
        assert_eq!(
            refusal,
            Refusal::EmptyPool {
                matched: 2,
                skipped: 2
            }
        );
        assert!(refusal
            .to_string()
            .contains("refusing to write an empty pool"));
    }

    #[test]
    fn a_pool_with_addresses_passes() {
        let desired = render(&PoolTemplate::default(), ["1.2.3.4".parse().unwrap()]);
        assert_eq!(check(&desired, 1, 0), Ok(()));
    }
}
