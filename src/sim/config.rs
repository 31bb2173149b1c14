//! [`MoldSimConfig`]: everything a simulator run is built from, and its checks.

use std::net::SocketAddrV4;
use std::path::PathBuf;
use std::time::Duration;

use crate::protocol::moldudp64::{BLOCK_HEADER_LEN, HEADER_LEN, Session};
use crate::protocol::soupbintcp::{PASSWORD_LEN, USERNAME_LEN};

use super::SimError;
use super::faults::{FaultConfig, LineFaults};
use super::net::is_allowed_destination;

/// Largest UDP payload over IPv4.
pub const MAX_UDP_PAYLOAD: usize = 65_507;
/// Largest history ring the re-request server may keep, in messages.
pub const MAX_HISTORY: usize = 1 << 22;
/// Largest number of concurrent snapshot clients.
pub const MAX_SNAPSHOT_CLIENTS: usize = 64;

/// Where the published messages come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// Synthetic messages carrying their own sequence number, spread over
    /// `instruments` instrument ids.
    Synthetic {
        /// Number of distinct instrument ids (at least 1).
        instruments: u16,
    },
    /// A file in Nasdaq's sample format, repeated as often as needed.
    ItchFile(PathBuf),
}

/// A redundant line of the feed: its group and what it does on its own.
#[derive(Debug, Clone, PartialEq)]
pub struct SimLine {
    /// Multicast group (or 127.0.0.0/8 address) and port.
    pub group: SocketAddrV4,
    /// The line's own loss, delay, death.
    pub faults: LineFaults,
}

/// The configuration of a simulator run; [`MoldSimConfig::new`] gives the
/// defaults, then set fields directly.
#[derive(Debug, Clone, PartialEq)]
pub struct MoldSimConfig {
    /// Multicast group (or 127.0.0.0/8 address) and port to publish to.
    pub group: SocketAddrV4,
    /// Name of the first session; restarts derive theirs from it.
    pub session: Session,
    /// Messages to publish over the whole run.
    pub count: u64,
    /// Messages per second; `None` publishes as fast as possible.
    pub rate: Option<f64>,
    /// Largest UDP payload of a downstream packet, header included.
    pub max_payload: usize,
    /// Send a heartbeat after this long without a packet; `None` never does.
    pub heartbeat_interval: Option<Duration>,
    /// End-of-session packets sent at the end of the run.
    pub end_of_session_repeats: u32,
    /// Pause between two end-of-session packets.
    pub end_of_session_gap: Duration,
    /// Pause before the first message.
    pub start_delay: Duration,
    /// Where messages come from.
    pub source: Source,
    /// Faults to inject at the source: what they drop is on no line.
    pub faults: FaultConfig,
    /// What the first line (on `group`) does on its own.
    pub line_faults: LineFaults,
    /// Redundant lines beyond the first, each on its own group with faults of its own:
    /// every datagram is published on every line.
    pub more_lines: Vec<SimLine>,
    /// Port of the re-request server on 127.0.0.1 (0: any free port).
    pub rerequest_port: u16,
    /// Messages of the current session the re-request server keeps.
    pub history: usize,
    /// Most messages one answer carries: a request for more is answered with at most
    /// this many, from its first sequence (the client asks again for the rest).
    pub max_request: u16,
    /// Port of the snapshot server on 127.0.0.1 (0: any free port).
    pub snapshot_port: u16,
    /// Username a snapshot client must log in with (at most 6 bytes).
    pub username: String,
    /// Password a snapshot client must log in with (at most 10 bytes).
    pub password: String,
    /// Server heartbeat interval on an idle snapshot connection.
    pub snapshot_heartbeat: Duration,
    /// How long a snapshot client may stay after the snapshot before the
    /// server ends the session on its own.
    pub snapshot_linger: Duration,
    /// How long a snapshot client may take to log in.
    pub login_timeout: Duration,
    /// Snapshot clients served at once; more wait to be accepted.
    pub max_snapshot_clients: usize,
}

impl MoldSimConfig {
    /// Defaults for publishing to `group`: session `SIM0000001`, 10,000
    /// synthetic messages over 100 instruments at 10,000 messages/s,
    /// 1,400-byte payloads, 1 s heartbeats, 3 end-of-session packets, no
    /// faults, servers on free ports, a 65,536-message history.
    pub fn new(group: SocketAddrV4) -> Self {
        Self {
            group,
            session: Session(*b"SIM0000001"),
            count: 10_000,
            rate: Some(10_000.0),
            max_payload: 1_400,
            heartbeat_interval: Some(Duration::from_secs(1)),
            end_of_session_repeats: 3,
            end_of_session_gap: Duration::from_millis(10),
            start_delay: Duration::ZERO,
            source: Source::Synthetic { instruments: 100 },
            faults: FaultConfig::default(),
            line_faults: LineFaults::default(),
            more_lines: Vec::new(),
            rerequest_port: 0,
            history: 65_536,
            max_request: 1_000,
            snapshot_port: 0,
            username: "sim".to_owned(),
            password: "sim".to_owned(),
            snapshot_heartbeat: Duration::from_secs(1),
            snapshot_linger: Duration::from_secs(5),
            login_timeout: Duration::from_secs(5),
            max_snapshot_clients: 4,
        }
    }

    /// Checks every setting that does not depend on the message source;
    /// `max_message_len` is the longest message the source produces.
    pub fn validate(&self, max_message_len: usize) -> Result<(), SimError> {
        let mut groups = vec![self.group];
        for (i, line) in self.more_lines.iter().enumerate() {
            if groups.contains(&line.group) {
                return Err(SimError::config(
                    "more_lines",
                    format!("line {} reuses group {}", i + 1, line.group),
                ));
            }
            groups.push(line.group);
        }
        for group in &groups {
            if !is_allowed_destination(*group.ip()) {
                return Err(SimError::ForbiddenDestination(*group));
            }
            if group.port() == 0 {
                return Err(SimError::config("group", "port 0 cannot be sent to"));
            }
        }
        let faults =
            std::iter::once(&self.line_faults).chain(self.more_lines.iter().map(|l| &l.faults));
        for f in faults {
            if !(0.0..=1.0).contains(&f.loss) {
                return Err(SimError::config("line loss", "must be in 0..=1"));
            }
        }
        if let Some(rate) = self.rate
            && !(rate.is_finite() && rate > 0.0)
        {
            return Err(SimError::config("rate", "must be a positive number"));
        }
        let smallest = HEADER_LEN + BLOCK_HEADER_LEN + max_message_len;
        if !(smallest..=MAX_UDP_PAYLOAD).contains(&self.max_payload) {
            return Err(SimError::config(
                "max_payload",
                format!(
                    "must be in {smallest}..={MAX_UDP_PAYLOAD} for messages of up to {max_message_len} bytes"
                ),
            ));
        }
        if self.heartbeat_interval == Some(Duration::ZERO) {
            return Err(SimError::config("heartbeat_interval", "must not be 0"));
        }
        if !(1..=MAX_HISTORY).contains(&self.history) {
            return Err(SimError::config(
                "history",
                format!("must be in 1..={MAX_HISTORY}"),
            ));
        }
        if self.max_request == 0 {
            return Err(SimError::config("max_request", "must be at least 1"));
        }
        if !(1..=MAX_SNAPSHOT_CLIENTS).contains(&self.max_snapshot_clients) {
            return Err(SimError::config(
                "max_snapshot_clients",
                format!("must be in 1..={MAX_SNAPSHOT_CLIENTS}"),
            ));
        }
        if self.snapshot_heartbeat.is_zero() {
            return Err(SimError::config("snapshot_heartbeat", "must not be 0"));
        }
        check_text("username", &self.username, USERNAME_LEN)?;
        check_text("password", &self.password, PASSWORD_LEN)?;
        if let Source::Synthetic { instruments: 0 } = self.source {
            return Err(SimError::config("instruments", "must be at least 1"));
        }
        self.validate_faults()
    }

    fn validate_faults(&self) -> Result<(), SimError> {
        let faults = &self.faults;
        for (field, p) in [
            ("loss", faults.loss),
            ("reorder", faults.reorder),
            ("duplicate", faults.duplicate),
            ("drop_answers", faults.drop_answers),
        ] {
            if !(0.0..=1.0).contains(&p) {
                return Err(SimError::config(field, "must be a probability in 0..=1"));
            }
        }
        if faults.reorder > 0.0 && faults.reorder_depth == 0 {
            return Err(SimError::config("reorder_depth", "must be at least 1"));
        }
        if faults.restart_after == Some(0) {
            return Err(SimError::config("restart_after", "must be at least 1"));
        }
        Ok(())
    }
}

/// Checks a login field: printable ASCII without spaces, at most `max` bytes.
fn check_text(field: &'static str, value: &str, max: usize) -> Result<(), SimError> {
    if value.len() > max {
        return Err(SimError::config(field, format!("at most {max} bytes")));
    }
    if !value.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(SimError::config(
            field,
            "printable ASCII without spaces only",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;

    fn config() -> MoldSimConfig {
        MoldSimConfig::new(SocketAddrV4::new(Ipv4Addr::new(239, 255, 1, 1), 40_000))
    }

    #[test]
    fn defaults_are_valid() {
        assert!(config().validate(44).is_ok());
    }

    #[test]
    fn refuses_unsafe_or_out_of_range_settings() {
        let mut c = config();
        c.group = SocketAddrV4::new(Ipv4Addr::new(192, 168, 1, 1), 40_000);
        assert!(matches!(
            c.validate(44),
            Err(SimError::ForbiddenDestination(_))
        ));
        c.group = SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, 2), 40_000);
        assert!(c.validate(44).is_ok());
        let cases: [fn(&mut MoldSimConfig); 8] = [
            |c| c.rate = Some(0.0),
            |c| c.max_payload = 50,
            |c| c.history = 0,
            |c| c.faults.loss = 1.5,
            |c| c.faults.restart_after = Some(0),
            |c| c.username = "toolongname".into(),
            |c| c.password = "pass word".into(),
            |c| c.heartbeat_interval = Some(Duration::ZERO),
        ];
        for (i, case) in cases.iter().enumerate() {
            let mut c = config();
            case(&mut c);
            assert!(
                matches!(c.validate(44), Err(SimError::Config { .. })),
                "case {i}"
            );
        }
    }
}
