//! What the controller shows the world while it runs: readiness and
//! liveness (`health`), Prometheus metrics (`metrics`), the HTTP server that
//! serves both (`http`) and logging (`telemetry`). These modules record and
//! present; they never decide what the pool holds.

pub mod health;
pub mod http;
pub mod metrics;
pub mod telemetry;
