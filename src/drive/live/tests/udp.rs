//! Shared by the loopback tests: one channel joined on 127.0.0.1 and the real rx loop on a
//! thread of its own, feeding one consumer queue.

#![allow(dead_code)]

use std::net::{SocketAddr, SocketAddrV4};
use std::sync::atomic::Ordering;
use std::thread::JoinHandle;

use crate::drive::live::{RxLoop, RxOptions, RxResult, RxShared};
use crate::io::idle::IdleStrategy;
use crate::publish::fanout::Fanout;
use crate::publish::{self, Consumer};
use crate::sinks::pcap::PcapTap;
use crate::venue::udp::LineSpec;
use crate::venue::{ChannelSpec, FeedSpec, UdpVenue, Wire};

/// A running rx loop and its consumer.
pub struct Handler {
    pub shared: RxShared,
    pub rx: JoinHandle<std::io::Result<RxResult>>,
    pub consumer: Consumer,
}

impl Handler {
    /// Stops the loop and returns what it hands back.
    pub fn stop(self) -> RxResult {
        self.shared.stop.store(true, Ordering::Relaxed);
        self.rx.join().expect("rx thread").expect("rx loop")
    }
}

/// A one-channel spec on `group` expecting sequence 1, with `rerequest` as its server if
/// any.
pub fn spec(wire: Wire, group: SocketAddrV4, rerequest: Option<SocketAddrV4>) -> FeedSpec {
    let mut channel = ChannelSpec::new("a", LineSpec::loopback(group));
    channel.rerequest = rerequest.map(SocketAddr::V4).into_iter().collect();
    let mut spec = FeedSpec::new(wire, vec![channel]);
    spec.start_from = Some(1);
    spec
}

/// Joins the spec's groups on 127.0.0.1 and runs the rx loop (recording into `tap` when
/// given).
pub fn start(
    spec: FeedSpec,
    idle: IdleStrategy,
    queue_bytes: usize,
    tap: Option<PcapTap>,
) -> Handler {
    let venue = UdpVenue::new("sim", spec);
    let (producer, consumer) = publish::channel(queue_bytes, 1);
    let shared = RxShared::default();
    let options = RxOptions {
        idle,
        ..RxOptions::default()
    };
    let mut rx_loop = RxLoop::new(
        vec![venue.into()],
        Fanout::new(vec![producer]),
        options,
        shared.clone(),
    )
    .expect("poll");
    if let Some(tap) = tap {
        rx_loop = rx_loop.with_recorder(tap);
    }
    let rx = std::thread::spawn(move || rx_loop.run());
    Handler {
        shared,
        rx,
        consumer,
    }
}
