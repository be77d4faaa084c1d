//! Per-node times of the engine's graphs, collected when [`crate::EngineOptions::profile`]
//! names a [`NodeProfile`]: each graph takes its rows at init and adds its times at the end of
//! every run (no allocation at run time). The caller reads them back, or formats them with
//! [`NodeProfile::report`]; the engine prints nothing.

use std::sync::Mutex;
use std::time::Duration;

use crate::util::Shape;

/// One node's time over the runs so far.
#[derive(Clone, Copy, Debug)]
pub struct NodeTime {
    /// The node type (as the graph names it, e.g. `XNNConv2d` or `XNNConv2d+XNNAdd`).
    pub op: &'static str,
    /// The node's output shape at its last run (channels-last).
    pub shape: Shape,
    pub runs: u32,
    pub total: Duration,
}

/// The nodes of one graph, in execution order.
#[derive(Clone, Debug, Default)]
pub struct GraphTimes {
    pub nodes: Vec<NodeTime>,
}

/// A collector of per-node times, shared by the graphs that report into it (one per
/// delegate or channels-last region).
#[derive(Debug, Default)]
pub struct NodeProfile {
    graphs: Mutex<Vec<GraphTimes>>,
}

impl NodeProfile {
    pub fn new() -> Self {
        Self::default()
    }

    /// The graphs' times so far, in the order the graphs were built.
    pub fn graphs(&self) -> Vec<GraphTimes> {
        self.lock().clone()
    }

    /// A new graph of `names.len()` nodes; returns its index.
    pub(crate) fn add_graph(&self, names: &[&'static str]) -> usize {
        let mut g = self.lock();
        g.push(GraphTimes {
            nodes: names
                .iter()
                .map(|&op| NodeTime {
                    op,
                    shape: Shape::default(),
                    runs: 0,
                    total: Duration::ZERO,
                })
                .collect(),
        });
        g.len() - 1
    }

    /// Adds one run's times (`(time, ran)` per node) of graph `graph`; `shape(i)` is node
    /// `i`'s output shape.
    pub(crate) fn add_run(
        &self,
        graph: usize,
        times: &[(Duration, bool)],
        shape: impl Fn(usize) -> Shape,
    ) {
        let mut g = self.lock();
        let Some(g) = g.get_mut(graph) else { return };
        for (i, (n, &(t, ran))) in g.nodes.iter_mut().zip(times).enumerate() {
            if ran {
                n.total += t;
                n.runs += 1;
                n.shape = shape(i);
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<GraphTimes>> {
        // A panic while holding the lock leaves whole rows behind: still readable.
        self.graphs.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A text report per graph that ran: time per run by node type, then every node in
    /// execution order (`all`) or the slowest dozen.
    pub fn report(&self, all: bool) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        for g in self.lock().iter() {
            let mut by_kind: Vec<(&str, Duration, u32)> = Vec::new();
            let mut rows = Vec::new();
            for (i, n) in g.nodes.iter().enumerate() {
                if n.runs == 0 {
                    continue;
                }
                match by_kind.iter_mut().find(|k| k.0 == n.op) {
                    Some(k) => {
                        k.1 += n.total;
                        k.2 += 1;
                    }
                    None => by_kind.push((n.op, n.total, 1)),
                }
                rows.push((n.total / n.runs, i));
            }
            if rows.is_empty() {
                continue;
            }
            let runs = g.nodes.iter().map(|n| n.runs).max().unwrap_or(1).max(1);
            by_kind.sort_by_key(|k| std::cmp::Reverse(k.1));
            let _ = writeln!(s, "XNNPACK delegate profile ({runs} runs; time per run):");
            for (name, t, nodes) in &by_kind {
                let _ = writeln!(
                    s,
                    "  {:>9.3} ms  {name} ({nodes} nodes)",
                    (t.as_secs_f64() * 1e3) / runs as f64
                );
            }
            if all {
                let _ = writeln!(s, "  nodes in order:");
            } else {
                rows.sort_by_key(|r| std::cmp::Reverse(r.0));
                rows.truncate(12);
                let _ = writeln!(s, "  slowest nodes:");
            }
            for &(t, i) in &rows {
                let n = &g.nodes[i];
                let _ = writeln!(
                    s,
                    "  {:>9.3} ms  node {i} {} -> {:?}",
                    t.as_secs_f64() * 1e3,
                    n.op,
                    n.shape.dims()
                );
            }
        }
        s
    }
}
