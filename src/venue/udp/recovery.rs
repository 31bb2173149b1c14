//! Recovery decisions of one channel: when a gap is re-requested, when it goes to the
//! snapshot, and when it is declared lost; and the re-request planner they use.
//!
//! `Channel::drive` runs after every datagram, answer, timer and snapshot end. While the
//! stream is synced it only keeps the planner clear. While something is missing it asks
//! the planner for requests once one is due, and falls back when re-requests cannot help:
//!
//! | situation | with a snapshot service | without |
//! | --- | --- | --- |
//! | the missing span is over `max_replay` | snapshot | re-request |
//! | every server spent its retry budget | snapshot | [`GapPolicy::Skip`]: declared lost; [`GapPolicy::Hold`]: stays unsynced |
//! | the stream latched `ResetRequired` | snapshot | `Skip`: declared lost; `Hold`: stays unsynced |
//!
//! The MoldUDP64 specification puts the receiver's part this way (section "Receiver
//! Processing"):
//!
//! ```text
//! //# If the sequence number does not match the next expected sequence
//! //# number, send a Request Packet to the Request Server with expected
//! //# packet number.
//! ```
//!
//! and the server's, which is why a partial answer is followed at once by a request for
//! the rest ("Requested Message Count"):
//!
//! ```text
//! //# If the
//! //# total size of the requested messages exceeds the maximum payload size of the of
//! //# one UDP packet, only the number of messages that completely fit will be returned.
//! //# Additional retransmission requests must be made for the subsequent messages if
//! //# they are still desired.
//! ```
//!
//! # The planner
//!
//! [`Requester`] is pure bookkeeping over a fixed table of requests in flight. The session asks it for
//! requests covering the missing ranges; it skips what is already asked for and not yet
//! timed out, and caps each request's count. Every request that times out spends one unit
//! of a retry budget, which refills whenever an answer brings a new message: a slow but
//! working server keeps going, a dead one is given up after `retry_budget` timeouts and the
//! next server is tried. Requests are rate-limited with a token bucket. Times are
//! nanoseconds on the caller's clock.
//!
//! A peer store (a `"jetstream"` entry: what the other daemon of a pair published, read
//! back) can be behind rather than gone: the peer publishes a message only once it has it
//! in order, so what this channel lost may not be stored yet. Such a server answers a
//! request for what it does not hold yet with a heartbeat carrying the next sequence it
//! holds ([`Requester::not_yet`]). While that head keeps rising, a request from it on that
//! times out spends no budget; once the head stood still for [`PEER_STALL_NS`] (the peer
//! lacks the same messages, or stopped publishing), the budget runs out as it does for a
//! dead server.

use std::net::SocketAddr;

use super::channel::{Channel, ChannelTimer, Core, LostTally, TX_QUEUE};
use super::snapshot::Phase;
use super::spec::FeedSpec;
use crate::publish::Event;
use crate::sequencer::{SeqRange, StreamState};
use crate::time::Mono;
use crate::venue::{Emit, GapPolicy, LostReason, Notice, Transmit};

/// Requests in flight per channel at most.
pub const MAX_INFLIGHT: usize = 64;

/// The longest a peer store's head may stand still while it says it does not hold a
/// request's messages yet, before its requests spend budget again. The peer publishes a
/// message after its own recovery of it (a quarter of a second of retries at the default
/// policy) and after its nats sink's acknowledgement, which may take up to the sink's
/// two-second acknowledgement timeout and a retry: three seconds covers both.
pub const PEER_STALL_NS: u64 = 3_000_000_000;

/// Re-request tuning, shared by a venue's channels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestPolicy {
    /// Wait this long after a gap appears before the first request (reordering settles).
    pub reorder_delay_ns: u64,
    /// A request not answered within this is retried.
    pub request_timeout_ns: u64,
    /// Messages asked for in one request at most.
    pub max_request_count: u16,
    /// Timed-out requests without a newly recovered message before a server is given up.
    pub retry_budget: u32,
    /// Requests per second at most, across the channel.
    pub requests_per_sec: u32,
}

impl Default for RequestPolicy {
    fn default() -> Self {
        Self {
            reorder_delay_ns: 1_000_000,
            request_timeout_ns: 50_000_000,
            max_request_count: 1000,
            retry_budget: 5,
            requests_per_sec: 2000,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Inflight {
    range: SeqRange,
    deadline: u64,
    /// Since it was sent, an answer brought a missing message before its range: the server
    /// is answering, and has not got to this one yet.
    behind: bool,
}

/// What a peer store said of the requests it does not hold yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct NotYet {
    /// The next sequence it holds: the highest it reported.
    head: u64,
    /// When `head` last rose.
    moved_at: u64,
}

/// What the planner decided for one missing piece.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plan {
    /// Send a request for `range` to `server`.
    Send {
        /// The server to ask.
        server: SocketAddr,
        /// What to ask for (at most `max_request_count` messages).
        range: SeqRange,
    },
    /// Every server spent its budget without progress: fall back to a snapshot or give up.
    Exhausted,
    /// Nothing more can be sent now (rate limit, table full, no servers); try again at the
    /// time [`Requester::next_deadline`] gives.
    Wait,
}

/// The planner of one channel.
#[derive(Debug)]
pub struct Requester {
    servers: Vec<SocketAddr>,
    /// Per server: it is a peer store, which answers what it does not hold yet with a
    /// heartbeat.
    peer_store: Vec<bool>,
    /// What the current server, a peer store, said it holds up to.
    not_yet: Option<NotYet>,
    server: usize,
    servers_spent: usize,
    budget_used: u32,
    /// When a timeout last spent a unit of the budget.
    spent_at: Option<u64>,
    inflight: [Option<Inflight>; MAX_INFLIGHT],
    /// How many of `inflight` are `Some`: kept so the per-datagram checks do not scan
    /// the table.
    inflight_count: usize,
    /// When the first plan for the current gaps is due (reorder delay after the gap).
    first_plan_at: Option<u64>,
    /// When a plan is due because a new gap appeared after the last one.
    replan_at: Option<u64>,
    /// The last plan stopped for lack of tokens or table slots.
    blocked: bool,
    tokens_ns: u64,
    tokens_at: u64,
    /// Requests that timed out, for metrics.
    pub timeouts: u64,
    /// Answers of a peer store that it does not hold a request's messages yet, for
    /// metrics.
    pub not_yet_answers: u64,
}

impl Requester {
    /// A planner over `servers`, tried in order.
    pub fn new(servers: Vec<SocketAddr>) -> Self {
        Self {
            peer_store: vec![false; servers.len()],
            servers,
            not_yet: None,
            server: 0,
            servers_spent: 0,
            budget_used: 0,
            spent_at: None,
            inflight: [None; MAX_INFLIGHT],
            inflight_count: 0,
            first_plan_at: None,
            replan_at: None,
            blocked: false,
            tokens_ns: 0,
            tokens_at: 0,
            timeouts: 0,
            not_yet_answers: 0,
        }
    }

    /// Marks the servers in `peer_stores` as peer stores ([`Requester::not_yet`]).
    #[must_use]
    pub fn with_peer_stores(mut self, peer_stores: &[SocketAddr]) -> Self {
        self.peer_store = self
            .servers
            .iter()
            .map(|s| peer_stores.contains(s))
            .collect();
        self
    }

    /// True when there is at least one server.
    pub fn has_servers(&self) -> bool {
        !self.servers.is_empty()
    }

    /// Forgets every request and timer (the gaps closed, or the stream was reset), and what
    /// a peer store said of its head (the next gap's wait starts afresh).
    pub fn clear(&mut self) {
        self.not_yet = None;
        if self.first_plan_at.is_some() || self.replan_at.is_some() || self.inflight() > 0 {
            self.inflight = [None; MAX_INFLIGHT];
            self.inflight_count = 0;
            self.first_plan_at = None;
            self.replan_at = None;
            self.blocked = false;
        }
    }

    /// Restores the whole budget and the server order: recovery moved on.
    pub fn progress(&mut self) {
        self.budget_used = 0;
        self.servers_spent = 0;
    }

    /// An answer brought the missing message `seq`: every request in flight for a range
    /// after it has a server that is answering and has not got to it yet. With
    /// `head_moved` (the stream delivered it: it closed the gap at the stream's head),
    /// recovery moved on: [`Requester::progress`]. A message after the head does not
    /// refill the budget, so a server that answers later gaps but never the first one
    /// still runs out, and the next server gets it.
    pub fn recovered(&mut self, seq: u64, head_moved: bool) {
        if head_moved {
            self.progress();
        }
        if self.inflight_count > 0 {
            for f in self.inflight.iter_mut().flatten() {
                f.behind |= seq < f.range.from;
            }
        }
    }

    /// A heartbeat came as an answer at `now`, saying that the server holds nothing from
    /// `head` on yet. From a peer store (the server asked now is one), requests from `head`
    /// on that time out spend no budget while the head keeps rising: see
    /// [`PEER_STALL_NS`]. False, changing nothing, when the server asked now is not a peer
    /// store: a venue's server answers with messages or not at all, and a heartbeat on the
    /// answer socket says nothing of its requests.
    pub fn not_yet(&mut self, now: u64, head: u64) -> bool {
        if !self.peer_store.get(self.server).copied().unwrap_or(false) {
            return false;
        }
        self.not_yet_answers += 1;
        self.not_yet = Some(match self.not_yet {
            Some(n) if head <= n.head => n,
            _ => NotYet {
                head,
                moved_at: now,
            },
        });
        true
    }

    /// Notes that something is missing at `now`: the first plan is due after the reorder
    /// delay (unless one is already scheduled).
    pub fn gap_seen(&mut self, now: u64, policy: &RequestPolicy) {
        if self.first_plan_at.is_none() && self.inflight() == 0 && self.replan_at.is_none() {
            self.first_plan_at = Some(now.saturating_add(policy.reorder_delay_ns));
        }
    }

    /// A new hole appeared while earlier ones are being recovered: plan again after the
    /// reorder delay.
    pub fn new_gap(&mut self, now: u64, policy: &RequestPolicy) {
        let at = now.saturating_add(policy.reorder_delay_ns);
        self.replan_at = Some(self.replan_at.map_or(at, |t| t.min(at)));
    }

    /// Plans again at `at` at the latest (a gap another line may still fill ripens then).
    pub fn plan_by(&mut self, at: u64) {
        self.replan_at = Some(self.replan_at.map_or(at, |t| t.min(at)));
    }

    /// True when a plan has something to do at `now`: the reorder delay passed, a request
    /// timed out, or a plan stopped by the rate limit can continue.
    pub fn due(&self, now: u64, policy: &RequestPolicy) -> bool {
        self.next_deadline(policy).is_some_and(|t| t <= now)
    }

    /// Drops requests whose deadline passed, counting them as timeouts (they are asked
    /// for again by the next plan). Timeouts spend the retry budget one unit per request
    /// timeout at most: a server is given up after `retry_budget` timeout periods in which
    /// its requests went unanswered, however many it had in flight. One that the server
    /// has not got to yet spends nothing: since it was sent, an answer brought a missing
    /// message before its range (a server answering in order and slower than the timeout:
    /// a JetStream stream read back, or a venue server under load). A server that moves
    /// the stream's head refills the budget; a dead one, or one that lacks the head's
    /// range, runs out. Nor does one a peer store said it does not hold yet while its head
    /// is rising ([`Requester::not_yet`]).
    pub fn expire(&mut self, now: u64, policy: &RequestPolicy) {
        let mut spent = false;
        let not_yet = self.not_yet;
        for slot in &mut self.inflight {
            if let Some(f) = slot.filter(|f| f.deadline <= now) {
                *slot = None;
                self.inflight_count -= 1;
                self.timeouts += 1;
                spent |= !f.behind && !peer_behind(not_yet, f.range.from, now);
            }
        }
        let period_over = self
            .spent_at
            .is_none_or(|at| now >= at.saturating_add(policy.request_timeout_ns));
        if spent && period_over {
            self.budget_used += 1;
            self.spent_at = Some(now);
        }
    }

    /// An answer covered `answered`: every request it touched is done. What such a request
    /// asked for and did not get is still missing, so the next plan asks for the rest at
    /// once (a server returns only what fits one packet).
    pub fn answered(&mut self, answered: SeqRange) {
        for slot in &mut self.inflight {
            if slot.is_some_and(|f| answered.from <= f.range.to && f.range.from <= answered.to) {
                *slot = None;
                self.inflight_count -= 1;
            }
        }
    }

    /// Plans requests for the missing `ranges`, calling `send` for each one to send now.
    /// Returns [`Plan::Exhausted`] when every server spent its budget, else [`Plan::Wait`].
    pub fn plan(
        &mut self,
        now: u64,
        policy: &RequestPolicy,
        ranges: impl Iterator<Item = SeqRange>,
        mut send: impl FnMut(SocketAddr, SeqRange),
    ) -> Plan {
        if self.servers.is_empty() {
            return Plan::Wait;
        }
        self.first_plan_at = None;
        self.replan_at = None;
        self.blocked = false;
        self.refill(now, policy);
        let step = u64::from(policy.max_request_count.max(1));
        for range in ranges {
            let mut from = range.from;
            while from <= range.to {
                // Skip what is already asked for.
                if let Some(covered_to) = self.covered_to(from) {
                    if covered_to >= range.to {
                        break;
                    }
                    from = covered_to + 1;
                    continue;
                }
                let mut to = range.to.min(from.saturating_add(step - 1));
                if let Some(next_start) = self.next_inflight_start(from, to) {
                    to = next_start - 1;
                }
                let chunk = SeqRange::new(from, to);
                if self.budget_used >= policy.retry_budget {
                    self.servers_spent += 1;
                    self.budget_used = 0;
                    if self.servers_spent >= self.servers.len() {
                        return Plan::Exhausted;
                    }
                    self.server = (self.server + 1) % self.servers.len();
                    self.not_yet = None;
                }
                let per_token = self.token_cost(policy);
                if self.tokens_ns < per_token {
                    self.blocked = true;
                    return Plan::Wait;
                }
                let Some(slot) = self.inflight.iter_mut().find(|s| s.is_none()) else {
                    // Full: the next answer or timeout frees a slot and plans again.
                    return Plan::Wait;
                };
                *slot = Some(Inflight {
                    range: chunk,
                    behind: false,
                    deadline: now.saturating_add(policy.request_timeout_ns),
                });
                self.inflight_count += 1;
                self.tokens_ns -= per_token;
                let Some(&server) = self.servers.get(self.server % self.servers.len()) else {
                    return Plan::Wait;
                };
                send(server, chunk);
                if to == u64::MAX {
                    break;
                }
                from = to + 1;
            }
        }
        Plan::Wait
    }

    /// The earliest time something here becomes due: the end of the reorder delay, a
    /// request deadline, or the next token when the bucket is empty.
    pub fn next_deadline(&self, policy: &RequestPolicy) -> Option<u64> {
        let inflight = self.inflight.iter().flatten().map(|f| f.deadline).min();
        let token = (self.blocked && self.tokens_ns < self.token_cost(policy))
            .then(|| self.tokens_at + (self.token_cost(policy) - self.tokens_ns));
        let unblocked = (self.blocked && self.tokens_ns >= self.token_cost(policy)).then_some(0);
        [
            self.first_plan_at,
            self.replan_at,
            inflight,
            token,
            unblocked,
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Requests in flight now.
    pub fn inflight(&self) -> usize {
        debug_assert_eq!(self.inflight_count, self.inflight.iter().flatten().count());
        self.inflight_count
    }

    fn covered_to(&self, seq: u64) -> Option<u64> {
        self.inflight
            .iter()
            .flatten()
            .filter(|f| f.range.contains(seq))
            .map(|f| f.range.to)
            .max()
    }

    fn next_inflight_start(&self, from: u64, to: u64) -> Option<u64> {
        self.inflight
            .iter()
            .flatten()
            .map(|f| f.range.from)
            .filter(|&s| s > from && s <= to)
            .min()
    }

    fn token_cost(&self, policy: &RequestPolicy) -> u64 {
        1_000_000_000 / u64::from(policy.requests_per_sec.max(1))
    }

    /// Token bucket in nanoseconds of credit, holding up to a tenth of a second's worth
    /// (at least one request).
    fn refill(&mut self, now: u64, policy: &RequestPolicy) {
        let cap = (100_000_000u64).max(self.token_cost(policy));
        if self.tokens_at == 0 {
            self.tokens_ns = cap;
        } else {
            let earned = now.saturating_sub(self.tokens_at);
            self.tokens_ns = self.tokens_ns.saturating_add(earned).min(cap);
        }
        self.tokens_at = now.max(self.tokens_at);
    }
}

/// True when a request from `from` waits on a peer store that said (`not_yet`) it does not
/// hold it yet, and whose head rose within [`PEER_STALL_NS`] of `now`.
fn peer_behind(not_yet: Option<NotYet>, from: u64, now: u64) -> bool {
    not_yet.is_some_and(|n| from >= n.head && now.saturating_sub(n.moved_at) <= PEER_STALL_NS)
}

impl Channel {
    /// Decides what recovery to run now; `force` plans even when no timer is due (an
    /// answer arrived: a partial one is followed at once by a request for the rest). Keeps
    /// the recovery timer armed exactly while the planner has something pending.
    pub(super) fn drive(
        &mut self,
        core: &mut Core,
        spec: &FeedSpec,
        now: Mono,
        force: bool,
        emit: &mut impl Emit,
    ) {
        self.plan_recovery(core, spec, now, force, emit);
        if spec.gap_policy == GapPolicy::Skip {
            self.expire_gaps(core, spec, now, emit);
        }
        self.drain_session(core, spec, now, emit);
        let waiting = self.phase == Phase::Idle
            && !self.given_up
            && matches!(
                core.detector.state(self.stream),
                StreamState::DirtySyncPending | StreamState::Recovering
            );
        let at = if waiting {
            self.requester
                .next_deadline(&self.policy)
                .map(Mono::from_nanos)
        } else {
            None
        };
        self.timers.set_or_stop(ChannelTimer::Recovery, at);
        self.report_lost(core, now, false);
    }

    fn plan_recovery(
        &mut self,
        core: &mut Core,
        spec: &FeedSpec,
        now: Mono,
        force: bool,
        emit: &mut impl Emit,
    ) {
        match self.phase {
            Phase::Running { .. } => return,
            Phase::Backoff { until } => {
                if now >= until {
                    self.phase = Phase::Idle;
                    self.timers.stop(ChannelTimer::SnapshotRetry);
                    self.start_snapshot(core, spec, now, emit);
                }
                return;
            }
            Phase::Idle => {}
        }
        let policy = self.policy;
        match core.detector.state(self.stream) {
            StreamState::Unseen | StreamState::Synced | StreamState::Closed => {
                self.requester.clear();
                self.ripening.clear();
                return;
            }
            StreamState::ResetRequired => {
                self.requester.clear();
                if self.given_up || self.start_snapshot(core, spec, now, emit) {
                    return;
                }
                self.unrecoverable(core, spec, now, emit);
                return;
            }
            StreamState::DirtySyncPending | StreamState::Recovering => {}
        }
        if self.given_up {
            return;
        }
        let now_ns = now.as_nanos();
        self.requester.gap_seen(now_ns, &policy);
        // Planning walks the missing ranges: only when something is due, not per datagram.
        if !force && !self.requester.due(now_ns, &policy) {
            return;
        }
        self.requester.expire(now_ns, &policy);
        let snapshot = self.spec.snapshot.is_some();
        if snapshot && core.detector.missing_span(self.stream) > spec.max_replay {
            self.start_snapshot(core, spec, now, emit);
            return;
        }
        // On redundant lines only a gap older than the arbitration window is asked for:
        // another line may still bring a younger one.
        let ripe_to = if self.lines.redundant() {
            self.ripening
                .forget_below(core.detector.missing(self.stream).next().map(|r| r.from));
            // Only once every ready socket was read: another line's copy of a gap may be
            // waiting in its socket behind the datagram being handled.
            while self.timer_pass
                && let Some(to) = self.ripening.pop_due(now)
            {
                self.ripe_to = self.ripe_to.max(to);
            }
            self.ripe_to
        } else {
            u64::MAX
        };
        let plan = if self.requester.has_servers() {
            let session = self.epochs.session.unwrap_or_default();
            let (tx, stats, endpoint, wire) =
                (&mut core.tx, &mut self.stats, self.unicast, spec.wire);
            self.requester.plan(
                now_ns,
                &policy,
                core.detector
                    .missing(self.stream)
                    .in_window()
                    .filter(|r| r.from <= ripe_to)
                    .map(|r| SeqRange::new(r.from, r.to.min(ripe_to))),
                |to, range| {
                    let count = range.len().min(u64::from(u16::MAX)) as u16;
                    let (bytes, len) = wire.encode_request(session, range.from, count);
                    if tx.len() < TX_QUEUE {
                        tx.push_back(Transmit {
                            endpoint,
                            to,
                            bytes,
                            len,
                        });
                        stats.requests += 1;
                    } else {
                        stats.requests_dropped += 1;
                    }
                },
            )
        } else {
            // Nothing can be asked for, now or later: a plan left due would be due at
            // every wake, and the loop would spin.
            self.requester.clear();
            Plan::Exhausted
        };
        if let Some(at) = self.ripening.next_due() {
            self.requester.plan_by(at.as_nanos());
        }
        if plan == Plan::Exhausted && !self.start_snapshot(core, spec, now, emit) {
            self.unrecoverable(core, spec, now, emit);
        }
    }

    /// Nothing can recover what is missing: declare it lost (`skip`, or the tail of a
    /// session the next one waits for), or latch the stream (`hold`).
    fn unrecoverable(&mut self, core: &mut Core, spec: &FeedSpec, now: Mono, emit: &mut impl Emit) {
        let draining = self.epochs.drain_until.is_some();
        match (spec.gap_policy, draining) {
            (_, true) => {
                self.skip(core, spec, now, u64::MAX, LostReason::SessionEnded, emit);
            }
            (GapPolicy::Skip, false) => {
                self.skip(core, spec, now, u64::MAX, self.lost_reason(), emit);
            }
            (GapPolicy::Hold, false) => self.give_up(core, emit),
        }
    }

    /// Why a gap given up now is lost: the servers gave up, or there never were any.
    fn lost_reason(&self) -> LostReason {
        if self.requester.has_servers() {
            LostReason::Exhausted
        } else {
            LostReason::NoRecoveryPath
        }
    }

    /// Under `gap_policy = "hold"`: re-requests gave up and no snapshot helps. The stream
    /// latches `reset_required` (what was buffered after the gap is let go), nothing more
    /// is tried until the next session, and the operator is told once.
    fn give_up(&mut self, core: &mut Core, emit: &mut impl Emit) {
        let from = core.detector.missing(self.stream).next().map_or_else(
            || core.detector.expected(self.stream).unwrap_or(0),
            |r| r.from,
        );
        let missing = core
            .detector
            .missing(self.stream)
            .fold(0u64, |n, r| n.saturating_add(r.len()));
        self.given_up = true;
        self.stats.recovery_exhausted += 1;
        self.requester.clear();
        self.gaps.clear();
        core.notices.push(Notice::RecoveryExhausted {
            stream: self.index,
            from,
            missing,
            servers: self.requester.has_servers(),
        });
        core.detector.begin_resync(self.stream);
        self.release_discarded(core);
        self.publish_state(core, emit);
    }

    /// Notes a gap that just appeared, for its deadline (`gap_policy = "skip"`).
    pub(super) fn gap_opened(&mut self, spec: &FeedSpec, now: Mono, gap: SeqRange) {
        if self.lines.redundant() {
            let ripe = now.after_nanos(spec.arbitration_window_ns);
            self.ripening.opened(gap, ripe);
        }
        if spec.gap_policy == GapPolicy::Skip {
            let due = Mono::from_nanos(now.as_nanos().saturating_add(spec.gap_deadline_ns));
            self.gaps.opened(gap, due);
        }
    }

    /// Declares lost every gap past its deadline, and arms the timer for the next one.
    fn expire_gaps(&mut self, core: &mut Core, spec: &FeedSpec, now: Mono, emit: &mut impl Emit) {
        let stream = self.stream;
        let open = |core: &Core| {
            matches!(
                core.detector.state(stream),
                StreamState::DirtySyncPending | StreamState::Recovering
            )
        };
        // Each pass removes one entry of the fixed clock: the clock bounds the passes.
        for _ in 0..=super::gaps::GAP_CLOCKS {
            let lowest = if open(core) {
                core.detector.missing(stream).next().map(|r| r.from)
            } else {
                None
            };
            self.gaps.forget_below(lowest);
            if self.phase != Phase::Idle {
                // A snapshot is on its way: it settles the gaps.
                break;
            }
            let Some(to) = self.gaps.pop_due(now) else {
                break;
            };
            self.skip(core, spec, now, to, LostReason::Deadline, emit);
        }
        self.timers
            .set_or_stop(ChannelTimer::GapDeadline, self.gaps.next_due());
    }

    /// Declares lost every missing range up to `limit` (all of them with `u64::MAX`): a gap
    /// event each, then delivery resumes after it.
    pub(super) fn skip(
        &mut self,
        core: &mut Core,
        spec: &FeedSpec,
        now: Mono,
        limit: u64,
        reason: LostReason,
        emit: &mut impl Emit,
    ) {
        // Each pass removes the first missing range; the ring bounds the passes.
        for _ in 0..=spec.window {
            let stream = self.stream;
            let state = core.detector.state(stream);
            let first = core.detector.missing(stream).next();
            let next = match (first, state) {
                (Some(range), _) if range.from <= limit => {
                    let range = SeqRange::new(range.from, range.to.min(limit));
                    self.lose(range, reason, emit);
                    range.to.saturating_add(1)
                }
                (None, StreamState::ResetRequired) => {
                    // Latched with nothing known missing (a suspected restart): start
                    // afresh from what is buffered, or from the expected sequence.
                    core.detector.expected(stream).unwrap_or(0)
                }
                _ => break,
            };
            self.resynchronize(core, next, emit);
        }
        self.requester.clear();
        self.publish_state(core, emit);
        self.report_lost(core, now, false);
    }

    /// Declares `range` lost: counted, reported (rate-limited) and told to the consumers as
    /// a gap event; the caller resumes delivery after it.
    pub(super) fn lose(&mut self, range: SeqRange, reason: LostReason, emit: &mut impl Emit) {
        self.lost(range, reason);
        emit.emit(&Event::Gap {
            stream: self.id,
            from: range.from,
            to: range.to,
        });
    }

    /// Counts `range` as lost, for the next report.
    fn lost(&mut self, range: SeqRange, reason: LostReason) {
        self.stats.gaps_lost += 1;
        self.stats.messages_lost = self.stats.messages_lost.saturating_add(range.len());
        let tally = self.logged.lost.get_or_insert(LostTally {
            from: range.from,
            to: range.to,
            gaps: 0,
            messages: 0,
            reason,
        });
        tally.to = range.to;
        tally.gaps += 1;
        tally.messages = tally.messages.saturating_add(range.len());
        tally.reason = reason;
    }

    /// Reports the gaps declared lost since the last report: at once for the first, then
    /// at most every [`LOST_NOTICE_EVERY_NS`] (`force`: now).
    pub(super) fn report_lost(&mut self, core: &mut Core, now: Mono, force: bool) {
        let Some(tally) = self.logged.lost else {
            return;
        };
        let due_at = self
            .logged
            .lost_at
            .map(|t| Mono::from_nanos(t.as_nanos().saturating_add(LOST_NOTICE_EVERY_NS)));
        if !force && due_at.is_some_and(|t| now < t) {
            self.timers
                .set(ChannelTimer::LostReport, due_at.unwrap_or(now));
            return;
        }
        self.timers.stop(ChannelTimer::LostReport);
        core.notices.push(Notice::GapsLost {
            stream: self.index,
            from: tally.from,
            to: tally.to,
            gaps: tally.gaps,
            messages: tally.messages,
            total: self.stats.messages_lost,
            reason: tally.reason,
        });
        self.logged.lost = None;
        self.logged.lost_at = Some(now);
    }
}

/// Gaps declared lost are reported at most this often per channel.
const LOST_NOTICE_EVERY_NS: u64 = 1_000_000_000;

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(port: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    fn policy() -> RequestPolicy {
        RequestPolicy {
            reorder_delay_ns: 1_000,
            request_timeout_ns: 10_000,
            max_request_count: 10,
            retry_budget: 2,
            requests_per_sec: 1_000_000,
        }
    }

    fn plan(r: &mut Requester, now: u64, ranges: &[SeqRange]) -> (Plan, Vec<(u16, SeqRange)>) {
        let mut sent = Vec::new();
        let p = r.plan(now, &policy(), ranges.iter().copied(), |s, range| {
            sent.push((s.port(), range))
        });
        (p, sent)
    }

    #[test]
    fn a_gap_with_no_recovery_path_leaves_no_timer_due() {
        use crate::protocol::moldudp64::{PacketWriter, Session};
        use crate::time::Wall;
        use crate::venue::udp::LineSpec;
        use crate::venue::{ChannelSpec, FeedSpec, Venue, Via, Wire};

        let line = LineSpec::loopback(std::net::SocketAddrV4::new([239, 255, 0, 1].into(), 1));
        let mut spec = FeedSpec::new(Wire::MoldUdp64, vec![ChannelSpec::new("a", line)]);
        spec.window = 64;
        spec.max_buffered = 64;
        spec.arena_datagrams = 8;
        spec.gap_policy = GapPolicy::Hold;
        spec.session_confirm = 1;
        let mut venue = crate::venue::UdpVenue::new("t", spec);
        let mut sink = |_: &crate::publish::Event<'_>| {};
        for (at, seq) in [(1_000u64, 1u64), (2_000, 3)] {
            let mut buf = [0u8; 64];
            let mut w = PacketWriter::new(&mut buf, Session(*b"TEST000001"), seq).unwrap();
            w.push(b"m").unwrap();
            let n = w.finish();
            let now = Mono::from_nanos(at);
            venue.on_datagram(
                now,
                0,
                &buf[..n],
                Wall::from_nanos(at),
                Via::Multicast,
                &mut sink,
            );
        }
        assert_eq!(venue.state(0), StreamState::DirtySyncPending);
        // The reorder delay passes: nothing can recover the gap, and under "hold" the
        // stream latches (it says so, and stops trying).
        let now = venue.poll_timeout().expect("the first plan is armed");
        venue.handle_timeout(now, &mut sink);
        assert_eq!(venue.state(0), StreamState::ResetRequired);
        // Before the fix the plan stayed due: poll_timeout kept answering a past time.
        assert!(
            venue.poll_timeout().is_none_or(|t| t > now),
            "a timer is still due: {:?}",
            venue.armed_timers()
        );
    }

    #[test]
    fn splits_by_count_and_skips_inflight() {
        let mut r = Requester::new(vec![addr(1)]);
        let (_, sent) = plan(&mut r, 1, &[SeqRange::new(1, 25)]);
        let got: Vec<_> = sent.iter().map(|(_, r)| (r.from, r.to)).collect();
        assert_eq!(got, [(1, 10), (11, 20), (21, 25)]);
        // The same gap again before the deadline: everything is already asked for.
        let (_, sent) = plan(&mut r, 2, &[SeqRange::new(1, 25)]);
        assert!(sent.is_empty());
        // A gap that grew: only the new part is asked for.
        let (_, sent) = plan(&mut r, 3, &[SeqRange::new(1, 28)]);
        assert_eq!(sent, [(1, SeqRange::new(26, 28))]);
    }

    #[test]
    fn timeout_retries_then_next_server_then_exhausted() {
        let mut r = Requester::new(vec![addr(1), addr(2)]);
        let gap = [SeqRange::new(5, 5)];
        let (_, sent) = plan(&mut r, 1, &gap);
        assert_eq!(sent, [(1, SeqRange::new(5, 5))]);
        r.expire(20_000, &policy());
        assert_eq!(r.timeouts, 1);
        let (_, sent) = plan(&mut r, 20_000, &gap);
        assert_eq!(sent, [(1, SeqRange::new(5, 5))]);
        r.expire(40_000, &policy());
        let (_, sent) = plan(&mut r, 40_000, &gap);
        assert_eq!(
            sent,
            [(2, SeqRange::new(5, 5))],
            "budget spent: second server"
        );
        r.expire(60_000, &policy());
        plan(&mut r, 60_000, &gap);
        r.expire(80_000, &policy());
        let (p, sent) = plan(&mut r, 80_000, &gap);
        assert_eq!(p, Plan::Exhausted);
        assert!(sent.is_empty());
    }

    #[test]
    fn progress_refills_the_budget() {
        let mut r = Requester::new(vec![addr(1)]);
        for round in 0..10u64 {
            let now = round * 20_000 + 1;
            r.expire(now, &policy());
            let (p, sent) = plan(&mut r, now, &[SeqRange::new(100 + round, 100 + round)]);
            assert_eq!(p, Plan::Wait);
            assert_eq!(sent.len(), 1, "round {round}");
            r.progress();
        }
    }

    #[test]
    fn a_server_answering_in_order_slower_than_the_timeout_keeps_its_budget() {
        // Ten requests out at once; the server answers one per timeout period, in order
        // (each answer brings what was missing): the rest time out meanwhile, and are asked
        // again, but the server stays the one asked and the plan never runs out.
        let mut r = Requester::new(vec![addr(1), addr(2)]);
        let mut missing: Vec<SeqRange> = (0..10)
            .map(|i| SeqRange::new(i * 10 + 1, i * 10 + 10))
            .collect();
        let (_, sent) = plan(&mut r, 1, &missing);
        assert_eq!(sent.len(), 10);
        let mut now = 1;
        while let Some(done) = missing.first().copied() {
            now += 15_000;
            r.answered(done);
            r.recovered(done.to, true);
            missing.remove(0);
            r.expire(now, &policy());
            let (p, sent) = plan(&mut r, now, &missing);
            assert_eq!(p, Plan::Wait, "at {now}");
            assert!(
                sent.iter().all(|(port, _)| *port == 1),
                "still the first server: {sent:?}"
            );
        }
        assert!(r.timeouts > 0, "the others timed out while it answered");
    }

    #[test]
    fn a_range_the_server_went_past_spends_the_budget() {
        // The server answers the later range (live loss) but never the earlier one (a hole
        // older than it holds): the earlier one's timeouts spend the budget, and the next
        // server gets it.
        let mut r = Requester::new(vec![addr(1), addr(2)]);
        // Four requests' worth of hole at the head (ten messages a request), one of live
        // loss after it, answered every round without moving the head.
        let (hole, live) = (SeqRange::new(1, 40), SeqRange::new(100, 100));
        let mut now = 1;
        let mut servers = Vec::new();
        for _ in 0..3 {
            let (_, sent) = plan(&mut r, now, &[hole, live]);
            servers.push(
                sent.iter()
                    .filter(|(_, range)| range.from < 100)
                    .map(|(p, _)| *p)
                    .collect::<Vec<_>>(),
            );
            r.answered(live);
            r.recovered(100, false);
            now += 15_000;
            r.expire(now, &policy());
        }
        assert_eq!(
            servers,
            [vec![1; 4], vec![1; 4], vec![2; 4]],
            "after two rounds of timeouts (the budget) the hole goes to the second server"
        );
    }

    #[test]
    fn requests_that_time_out_together_spend_one_unit() {
        let mut r = Requester::new(vec![addr(1), addr(2)]);
        let gap = [SeqRange::new(1, 100)];
        let (_, sent) = plan(&mut r, 1, &gap);
        assert_eq!(sent.len(), 10);
        r.expire(20_000, &policy());
        let (_, sent) = plan(&mut r, 20_000, &gap);
        assert!(
            sent.iter().all(|(p, _)| *p == 1),
            "one unit of two spent: {sent:?}"
        );
        r.expire(40_000, &policy());
        let (_, sent) = plan(&mut r, 40_000, &gap);
        assert!(sent.iter().all(|(p, _)| *p == 2), "two spent: {sent:?}");
        assert_eq!(r.timeouts, 20);
    }

    #[test]
    fn timeouts_spend_one_unit_per_request_timeout_at_most() {
        // Requests sent a little apart time out a little apart: within one request timeout
        // (10,000 here) they spend one unit, not one each.
        let mut r = Requester::new(vec![addr(1), addr(2)]);
        plan(&mut r, 1, &[SeqRange::new(1, 10)]);
        plan(&mut r, 4_000, &[SeqRange::new(1, 20)]);
        plan(&mut r, 8_000, &[SeqRange::new(1, 30)]);
        for now in [10_001, 14_000, 18_000] {
            r.expire(now, &policy());
        }
        assert_eq!(r.timeouts, 3);
        let (_, sent) = plan(&mut r, 18_000, &[SeqRange::new(1, 30)]);
        assert!(
            sent.iter().all(|(p, _)| *p == 1),
            "one unit of two spent: {sent:?}"
        );
    }

    #[test]
    fn a_server_that_stops_answering_spends_its_budget_again() {
        let mut r = Requester::new(vec![addr(1), addr(2)]);
        let gap = [SeqRange::new(5, 5)];
        plan(&mut r, 1, &gap);
        // A message after its range: the server went past it, and its timeouts spend the
        // budget as before.
        r.recovered(9, false);
        r.expire(20_000, &policy());
        plan(&mut r, 20_000, &gap);
        r.expire(40_000, &policy());
        let (_, sent) = plan(&mut r, 40_000, &gap);
        assert_eq!(
            sent,
            [(2, SeqRange::new(5, 5))],
            "budget spent: second server"
        );
    }

    /// Runs a gap at 5,000 against a venue server (port 1, which never answers) then a
    /// peer store (port 2) whose "not yet" answers give the heads `head_at(round)` (`None`:
    /// no answer), one round per request timeout; returns the round the plan ran out in.
    fn rounds_until_exhausted(head_at: impl Fn(u64) -> Option<u64>) -> Option<u64> {
        let mut r = Requester::new(vec![addr(1), addr(2)]).with_peer_stores(&[addr(2)]);
        let gap = [SeqRange::new(5_000, 5_000)];
        let mut now = 1;
        for round in 0..2_000u64 {
            let (p, sent) = plan(&mut r, now, &gap);
            if p == Plan::Exhausted {
                return Some(round);
            }
            if let (Some(head), Some((port, _))) = (head_at(round), sent.first()) {
                // A venue server's heartbeat on the answer socket is not an answer.
                assert_eq!(r.not_yet(now, head), *port == 2, "round {round}");
            }
            now += 10_000;
            r.expire(now, &policy());
        }
        None
    }

    #[test]
    fn a_peer_store_behind_is_waited_for_while_its_head_rises() {
        // Its head rises by one every round: after two thousand rounds (a thousand times
        // the budget of two timeouts) it is still waited for.
        assert_eq!(rounds_until_exhausted(Some), None);
        // Without its answers, two timeouts on each server use the budgets up.
        assert_eq!(rounds_until_exhausted(|_| None), Some(4));
    }

    #[test]
    fn a_peer_store_whose_head_stands_still_is_given_up() {
        // The head stops at 40 (the peer lacks 40, or stopped publishing): once it stood
        // still for PEER_STALL_NS (300,000 rounds of 10,000 ns) the budget runs out as a dead
        // server's does, two rounds later.
        let stall_rounds = PEER_STALL_NS / 10_000;
        let mut r = Requester::new(vec![addr(2)]).with_peer_stores(&[addr(2)]);
        let gap = [SeqRange::new(50, 50)];
        let mut now = 1;
        let mut exhausted_at = None;
        for round in 0..stall_rounds + 10 {
            let (p, _) = plan(&mut r, now, &gap);
            if p == Plan::Exhausted {
                exhausted_at = Some(round);
                break;
            }
            assert!(r.not_yet(now, 40));
            now += 10_000;
            r.expire(now, &policy());
        }
        let at = exhausted_at.expect("given up");
        assert!(
            (stall_rounds..=stall_rounds + 3).contains(&at),
            "given up in round {at}, the stall is {stall_rounds} rounds"
        );
        assert_eq!(r.not_yet_answers, at);
    }

    #[test]
    fn a_not_yet_answer_spares_only_requests_from_its_head_on() {
        // The peer holds up to 19: a request from 10 it does not answer is a hole in what
        // it stored, and spends the budget; one from 30 waits.
        let mut r = Requester::new(vec![addr(2), addr(3)]).with_peer_stores(&[addr(2)]);
        let mut now = 1;
        let mut servers = Vec::new();
        for _ in 0..3 {
            let (_, sent) = plan(&mut r, now, &[SeqRange::new(10, 10)]);
            servers.extend(sent.iter().map(|(p, _)| *p));
            assert_eq!(r.not_yet(now, 20), servers.last() == Some(&2));
            now += 10_000;
            r.expire(now, &policy());
        }
        assert_eq!(servers, [2, 2, 3], "the hole at 10 went to the next server");
        let mut r = Requester::new(vec![addr(2), addr(3)]).with_peer_stores(&[addr(2)]);
        let mut now = 1;
        for round in 0..50 {
            let (_, sent) = plan(&mut r, now, &[SeqRange::new(30, 30)]);
            assert_eq!(sent, [(2, SeqRange::new(30, 30))], "round {round}");
            r.not_yet(now, 20 + round / 10);
            now += 10_000;
            r.expire(now, &policy());
        }
    }

    #[test]
    fn partial_answer_frees_the_remainder_at_once() {
        let mut r = Requester::new(vec![addr(1)]);
        plan(&mut r, 1, &[SeqRange::new(1, 10)]);
        assert_eq!(r.inflight(), 1);
        r.answered(SeqRange::new(1, 4));
        assert_eq!(r.inflight(), 0);
        let (_, sent) = plan(&mut r, 2, &[SeqRange::new(5, 10)]);
        assert_eq!(sent, [(1, SeqRange::new(5, 10))]);
    }

    #[test]
    fn rate_limit_waits_for_a_token() {
        let mut r = Requester::new(vec![addr(1)]);
        let slow = RequestPolicy {
            requests_per_sec: 10,
            retry_budget: 100,
            ..policy()
        };
        let mut sent = 0;
        let p = r.plan(1, &slow, [SeqRange::new(1, 100)].into_iter(), |_, _| {
            sent += 1
        });
        assert_eq!(p, Plan::Wait);
        assert_eq!(
            sent, 1,
            "a tenth of a second of credit is one request at 10/s"
        );
        assert!(r.next_deadline(&slow).is_some_and(|d| d > 1));
    }
}
