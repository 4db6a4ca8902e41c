//! What the controller's tests share: a synthetic platform, a target whose pages fall into
//! regions of known miss rate and whose IPC is a known function of which pages are
//! confined, plus noise; and a harness that drives one controller against it.

use std::collections::HashSet;

use rocs_core::{
    Action, Colour, ColourReport, Controller, CounterDelta, DataSource, Errno, Knobs, MemSample,
    MigrationReport, Observation, Placement, SearchMode, State, VirtPage,
};

pub const PID: u32 = 42;
pub const SHIFT: u32 = 12;

/// splitmix64: a small deterministic generator for tests.
pub struct Rng(pub u64);
impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    pub fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    pub fn gauss(&mut self) -> f64 {
        let (u1, u2) = (self.unit().max(1e-12), self.unit());
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    }
}

/// A sampled load of `pid` at `vaddr`, an LLC miss or a hit.
pub fn load(pid: u32, vaddr: u64, miss: bool, time: u64) -> MemSample {
    MemSample {
        pid,
        tid: pid,
        vaddr,
        paddr: None,
        source: if miss {
            DataSource::LlcMiss
        } else {
            DataSource::LlcHit
        },
        weight: 0,
        time,
    }
}

/// A region of the synthetic target: pages, true miss rate, share of LLC accesses, and the
/// IPC gain (fraction of base IPC) when all of it is confined (negative: a loss).
#[derive(Clone, Copy, Debug)]
pub struct Class {
    pub first: u64,
    pub pages: u64,
    pub miss_rate: f64,
    pub share: f64,
    pub gain: f64,
}

pub struct World {
    pub classes: Vec<Class>,
    pub base_ipc: f64,
    pub mpki: f64,
    pub noise: f64,
    pub rng: Rng,
    pub sampling: bool,
    pub samples_per_window: usize,
    /// Pages whose migration fails with EBUSY.
    pub unmovable: HashSet<u64>,
    pub confined: HashSet<u64>,
    /// IPC grows by this share of the base IPC each window, whatever is confined (a
    /// program warming up).
    pub warming: f64,
    /// LLC references are this many times as many in a window spent sampling (a
    /// prefetcher switched off while the PMU samples: its demand loads then miss the L2).
    pub references_while_sampling: f64,
    pub windows: u64,
}

impl World {
    pub fn new(classes: Vec<Class>, noise: f64, seed: u64) -> Self {
        World {
            classes,
            base_ipc: 0.5,
            mpki: 20.0,
            noise,
            rng: Rng(seed),
            sampling: false,
            samples_per_window: 4000,
            unmovable: HashSet::new(),
            confined: HashSet::new(),
            warming: 0.0,
            references_while_sampling: 1.0,
            windows: 0,
        }
    }

    /// True IPC of the current placement, without noise.
    pub fn true_ipc(&self) -> f64 {
        let mut f = 1.0;
        for c in &self.classes {
            let n = (c.first..c.first + c.pages)
                .filter(|p| self.confined.contains(p))
                .count();
            f += c.gain * n as f64 / c.pages as f64;
        }
        // A target always makes some progress.
        self.base_ipc * f.max(0.05)
    }

    pub fn samples(&mut self) -> Vec<MemSample> {
        let total: f64 = self.classes.iter().map(|c| c.share).sum();
        (0..self.samples_per_window)
            .map(|i| {
                let mut x = self.rng.unit() * total;
                let c = *self
                    .classes
                    .iter()
                    .find(|c| {
                        x -= c.share;
                        x <= 0.0
                    })
                    .unwrap_or(self.classes.last().unwrap());
                let page = c.first + self.rng.next() % c.pages;
                let miss = self.rng.unit() < c.miss_rate;
                let vaddr = (page << SHIFT) + (self.rng.next() % 4096);
                load(PID, vaddr, miss, i as u64)
            })
            .collect()
    }

    pub fn window(&mut self) -> CounterDelta {
        let drift = 1.0 + self.warming * self.windows as f64;
        self.windows += 1;
        let ipc = self.true_ipc() * drift * (1.0 + self.noise * self.rng.gauss());
        let cycles = 1_000_000_000u64;
        let instructions = (ipc * cycles as f64) as u64;
        let llc_misses = (self.mpki * instructions as f64 / 1000.0) as u64;
        let per_miss = if self.sampling {
            2.0 * self.references_while_sampling
        } else {
            2.0
        };
        CounterDelta {
            instructions,
            cycles,
            llc_references: (llc_misses as f64 * per_miss) as u64,
            llc_misses,
            time_enabled: cycles,
            time_running: cycles,
        }
    }
}

/// Drives one controller against a world, checking the protocol as it goes.
pub struct Harness {
    pub ctrl: Controller,
    pub world: World,
    pub budget: u32,
    pub moved_this_window: u32,
    pub max_moved_in_a_window: u32,
    pub migrate_actions: usize,
    /// Every page a migration was asked to move.
    pub asked_to_move: HashSet<u64>,
}

impl Harness {
    pub fn new(knobs: Knobs, world: World) -> Self {
        let budget = knobs.page_budget;
        Harness {
            ctrl: Controller::new(PID, knobs, SHIFT, 16).unwrap(),
            world,
            budget,
            moved_this_window: 0,
            max_moved_in_a_window: 0,
            migrate_actions: 0,
            asked_to_move: HashSet::new(),
        }
    }

    pub fn handle(&mut self, actions: Vec<Action>) {
        for a in actions {
            match a {
                Action::StartSampling(plan) => {
                    assert!(plan.period > 0);
                    self.world.sampling = true;
                }
                Action::StopSampling => self.world.sampling = false,
                Action::Migrate { pages, to } => {
                    self.migrate_actions += 1;
                    self.asked_to_move.extend(pages.iter().map(|p| p.0));
                    self.moved_this_window += pages.len() as u32;
                    self.max_moved_in_a_window =
                        self.max_moved_in_a_window.max(self.moved_this_window);
                    let results = pages
                        .iter()
                        .map(|p| {
                            if self.world.unmovable.contains(&p.0) {
                                return Err(Errno::EBUSY);
                            }
                            match to {
                                Placement::Pollute => self.world.confined.insert(p.0),
                                Placement::Restore | Placement::Ordinary(_) => {
                                    self.world.confined.remove(&p.0)
                                }
                            };
                            Ok(Colour(0))
                        })
                        .collect();
                    let next = self.ctrl.on(Observation::Migrated(MigrationReport {
                        to,
                        pages,
                        results,
                    }));
                    self.handle(next);
                }
                Action::Query { pages } => {
                    let results = pages
                        .iter()
                        .map(|p| {
                            Ok(if self.world.confined.contains(&p.0) {
                                Colour(15)
                            } else {
                                Colour((p.0 % 15) as u32)
                            })
                        })
                        .collect();
                    let next = self
                        .ctrl
                        .on(Observation::Colours(ColourReport { pages, results }));
                    self.handle(next);
                }
                Action::Report(_) => {}
            }
        }
    }

    pub fn window(&mut self) {
        if self.world.sampling {
            let s = self.world.samples();
            let a = self.ctrl.on(Observation::Samples(&s));
            self.handle(a);
        }
        let d = self.world.window();
        self.moved_this_window = 0;
        let a = self.ctrl.on(Observation::Window(d));
        self.handle(a);
        assert!(
            self.moved_this_window <= self.budget,
            "{} pages moved in one window, budget {}",
            self.moved_this_window,
            self.budget
        );
    }

    pub fn run_until_steady(&mut self, limit: usize) -> usize {
        for w in 0..limit {
            self.window();
            if self.ctrl.state() == State::Steady && w > 0 {
                return w + 1;
            }
        }
        panic!(
            "not steady after {limit} windows: {:?}",
            self.ctrl.history().collect::<Vec<_>>()
        );
    }

    /// The confined set equals the top k of the stack for some k.
    pub fn confined_is_top_k(&self) -> usize {
        let k = self.ctrl.confined().len();
        let top: HashSet<VirtPage> = self.ctrl.stack().top(k).collect();
        let confined: HashSet<VirtPage> = self.ctrl.confined().iter().copied().collect();
        assert_eq!(
            top, confined,
            "confined set is not the top {k} of the stack"
        );
        k
    }
}

/// art-like: a big streamed region that gains when confined, a reused region that loses.
pub fn art_like() -> Vec<Class> {
    vec![
        Class {
            first: 1000,
            pages: 500,
            miss_rate: 0.85,
            share: 0.4,
            gain: 0.25,
        },
        Class {
            first: 1600,
            pages: 160,
            miss_rate: 0.42,
            share: 0.55,
            gain: -0.8,
        },
        Class {
            first: 2000,
            pages: 100,
            miss_rate: 0.05,
            share: 0.05,
            gain: -0.1,
        },
    ]
}

pub fn flat(gain_a: f64) -> Vec<Class> {
    let mut c = art_like();
    c[0].gain = gain_a;
    c[1].gain = 0.0;
    c[2].gain = 0.0;
    c
}

pub fn knobs(mode: SearchMode) -> Knobs {
    Knobs {
        search: mode,
        ..Knobs::default()
    }
}

pub fn best_possible(classes: &[Class]) -> f64 {
    1.0 + classes.iter().map(|c| c.gain.max(0.0)).sum::<f64>()
}
