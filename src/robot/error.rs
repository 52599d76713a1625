//! What can go wrong with the Robot webservice, each with what to do.

/// An error of the Robot webservice, or of reading its answer. Never
/// holds the credentials.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RobotError {
    #[error(
        "the Robot webservice refused the credentials (401 {code}): this process sends no Robot \
         request until the user (CANADA_KAKTUS_ROBOT_USER or its file) or the password \
         (CANADA_KAKTUS_ROBOT_PASSWORD or its file) change (three failed logins block this IP for 10 minutes); use a \
         webservice user from Robot's settings"
    )]
    Unauthorized { code: String },

    #[error(
        "the Robot webservice's rate limit for {list} is used up (403 RATE_LIMIT_EXCEEDED, {}); \
         the next {list} request waits {}",
        limit_text(*max_requests, *interval),
        wait_text(*interval)
    )]
    RateLimited {
        list: &'static str,
        max_requests: Option<u64>,
        /// Seconds, as the error document names them.
        interval: Option<u64>,
    },

    #[error("the Robot webservice is in maintenance (503); the Robot members stay as they were")]
    Unavailable,

    #[error("the Robot webservice answered {status} {code} for {list}: {message}")]
    Status {
        list: &'static str,
        status: u16,
        code: String,
        message: String,
    },

    #[error("the Robot webservice's {list} answer could not be read: {reason}")]
    Decode { list: &'static str, reason: String },

    #[error(
        "the Robot webservice at {host} (the host of RobotEndpoint) did not answer GET /{list}: \
         {reason}"
    )]
    Transport {
        host: String,
        list: &'static str,
        reason: String,
    },

    #[error("the Robot client cannot be built: {reason}")]
    Client { reason: String },

    #[error(
        "the Robot webservice did not answer every list within {seconds}s; the Robot members \
         stay as they were"
    )]
    TimedOut { seconds: u64 },

    #[error(
        "the Robot webservice was last listed less than a minute ago, and that listing left no \
         answer to use (it was read before this leadership term began, when another replica \
         may have written since, or it was cut off before it ended by a reload or the cycle's \
         time limit); Robot is listed at most once a minute, so the next listing may come in \
         {seconds}s; the Robot members stay as they were"
    )]
    Waiting { seconds: u64 },
}

fn limit_text(max_requests: Option<u64>, interval: Option<u64>) -> String {
    match (max_requests, interval) {
        (Some(max), Some(interval)) => format!("{max} requests per {interval}s"),
        _ => "limit not named".to_owned(),
    }
}

fn wait_text(interval: Option<u64>) -> String {
    match interval {
        Some(seconds) => format!("{seconds}s"),
        None => "an hour".to_owned(),
    }
}

impl RobotError {
    /// The `cause` label of metrics and logs.
    pub fn metric_label(&self) -> &'static str {
        match self {
            RobotError::Unauthorized { .. } => "robot_unauthorized",
            RobotError::RateLimited { .. } => "robot_rate_limited",
            RobotError::Unavailable => "robot_unavailable",
            RobotError::Status { .. } => "robot_status",
            RobotError::Decode { .. } => "robot_decode",
            RobotError::Transport { .. } => "robot_transport",
            RobotError::Client { .. } => "robot_client",
            RobotError::TimedOut { .. } => "robot_timeout",
            RobotError::Waiting { .. } => "robot_waiting",
        }
    }
}
