//! How the stages hand records on: in containers of at most [`CHUNK`] records ([`Chunks`]),
//! one container per send on an output port ([`ship`]), and graph changes straight to the
//! output's worker through the side channel where it is in this process ([`ToOutput`]).
//! Every stage queues its input by epoch ([`Pending`]) and works on an epoch once its input
//! frontier has passed it.

use super::{Diff, Update};
use crossbeam_channel::Sender;
use std::collections::BTreeMap;
use timely::container::CapacityContainerBuilder;
use timely::dataflow::operators::generic::OutputBuilder;
use timely::dataflow::operators::Capability;

/// Records per container of [`Chunks`] and per input part (`input::Part`).
pub(super) const CHUNK: usize = 4096;

/// Records in containers of at most [`CHUNK`] (the size of timely's own buffers): each
/// container is allocated once and the allocator recycles it, where one vector growing to an
/// epoch's size would be copied at each doubling and land on fresh pages.
pub(super) struct Chunks<D> {
    full: Vec<Vec<D>>,
    cur: Vec<D>,
}

impl<D> Default for Chunks<D> {
    fn default() -> Self {
        Chunks {
            full: Vec::new(),
            cur: Vec::new(),
        }
    }
}

impl<D> Chunks<D> {
    #[inline]
    pub(super) fn push(&mut self, d: D) {
        if self.cur.len() == CHUNK {
            let full = std::mem::replace(&mut self.cur, Vec::with_capacity(CHUNK));
            self.full.push(full);
        }
        self.cur.push(d);
    }

    /// The containers, in push order.
    pub(super) fn into_containers(self) -> impl Iterator<Item = Vec<D>> {
        self.full.into_iter().chain(std::iter::once(self.cur))
    }
}

/// Epochs waiting for their input to be complete: capabilities (one per output) and data.
pub(super) type Pending<C, D> = BTreeMap<u64, (C, Vec<D>)>;

/// An output port with its container builder.
pub(super) type Port<D> = OutputBuilder<u64, CapacityContainerBuilder<Vec<(D, Diff)>>>;

/// Sends `data` at `cap` on `port` as one container (no copy when it stays on this worker).
pub(super) fn ship<D: Clone + 'static>(
    port: &mut Port<D>,
    cap: &Capability<u64>,
    mut data: Vec<(D, Diff)>,
) {
    if !data.is_empty() {
        port.activate().session(cap).give_container(&mut data);
    }
}

/// Sends every container of `data` at `cap` on `port`.
pub(super) fn ship_all<D: Clone + 'static>(
    port: &mut Port<D>,
    cap: &Capability<u64>,
    data: Chunks<(D, Diff)>,
) {
    for c in data.into_containers() {
        ship(port, cap, c);
    }
}

/// A container of graph changes.
pub(super) type Changes = Vec<(Update, Diff)>;

/// Where an operator's graph changes go: through the side channel to worker 0 (the workers
/// of the process that writes the output, see [`super::run`]), else (`None`) on the
/// operator's stream, which the caller ships them on.
pub(super) struct ToOutput(pub(super) Option<Sender<(u64, Changes)>>);

impl ToOutput {
    /// Sends `changes` of epoch `epoch` through the side channel when there is one (the
    /// caller must still hold the epoch's capability); otherwise hands them back.
    pub(super) fn send(&self, epoch: u64, changes: Changes) -> Option<Changes> {
        match &self.0 {
            Some(tx) => {
                if !changes.is_empty() {
                    // A closed receiver means the output operator is gone (shutting down).
                    let _ = tx.send((epoch, changes));
                }
                None
            }
            None => Some(changes),
        }
    }
}
