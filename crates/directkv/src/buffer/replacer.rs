//! Scan-resistant replacement: 2Q with two LRU lists over frame indexes.
//!
//! - A page loaded by a normal access enters the head of **probation**; a scan's
//!   page enters its tail (first to go).
//! - A normal access to a page in probation promotes it to the head of
//!   **protected**; a scan's access never promotes. Protected holds at most
//!   `protected_max` frames; overflow is demoted to the head of probation.
//! - Victims come from the tail of probation, then of protected, skipping pinned
//!   frames.
//!
//! A full scan therefore cycles through probation only and leaves the hot set in
//! protected untouched (the test `scan_does_not_flush_the_hot_set` checks it).
//!
//! Every access also stamps the frame with the cleaner's current pass, so the
//! cleaner can tell a page that is merely near the cold end from one that is
//! cold: unused since its previous pass (in the spirit of PostgreSQL's usage
//! counts, a page touched by every commit is never "cold").

use crate::format::FrameIndex;

/// How a page is being accessed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Point lookups and updates: a second access marks the page hot.
    Normal,
    /// Sequential scans: never promote, evict first.
    Scan,
}

/// The end of a list: no frame.
const NIL: FrameIndex = FrameIndex::new(u32::MAX);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum List {
    None,
    Probation,
    Protected,
}

#[derive(Debug, Clone, Copy)]
struct Ends {
    head: FrameIndex,
    tail: FrameIndex,
    len: usize,
}

const EMPTY: Ends = Ends {
    head: NIL,
    tail: NIL,
    len: 0,
};

/// The replacement lists of a pool of `n` frames.
#[derive(Debug)]
pub(crate) struct Replacer {
    prev: Vec<FrameIndex>,
    next: Vec<FrameIndex>,
    list: Vec<List>,
    probation: Ends,
    protected: Ends,
    protected_max: usize,
    /// The cleaner's pass under way.
    pass: u64,
    /// The pass during which each frame was last accessed.
    used: Vec<u64>,
}

impl Replacer {
    pub fn new(frames: usize) -> Replacer {
        assert!(frames > 0 && frames < NIL.index());
        Replacer {
            prev: vec![NIL; frames],
            next: vec![NIL; frames],
            list: vec![List::None; frames],
            probation: EMPTY,
            protected: EMPTY,
            // InnoDB keeps 3/8 of its pool "old"; protect the other 5/8.
            protected_max: (frames * 5 / 8).max(1),
            pass: 0,
            used: vec![0; frames],
        }
    }

    /// Starts a cleaner pass; returns its number.
    pub fn begin_pass(&mut self) -> u64 {
        self.pass += 1;
        self.pass
    }

    /// Whether frame `f` went unused since the pass before `pass` began:
    /// cold, for the cleaner's pass `pass`.
    pub fn unused_since_last_pass(&self, f: FrameIndex, pass: u64) -> bool {
        assert!(pass <= self.pass, "a pass that has begun");
        self.used[f.index()] + 1 < pass
    }

    fn ends(&mut self, l: List) -> &mut Ends {
        match l {
            List::Probation => &mut self.probation,
            List::Protected => &mut self.protected,
            List::None => unreachable!("no list"),
        }
    }

    fn unlink(&mut self, f: FrameIndex) {
        let l = self.list[f.index()];
        if l == List::None {
            return;
        }
        let (p, n) = (self.prev[f.index()], self.next[f.index()]);
        if p != NIL {
            self.next[p.index()] = n;
        } else {
            self.ends(l).head = n;
        }
        if n != NIL {
            self.prev[n.index()] = p;
        } else {
            self.ends(l).tail = p;
        }
        assert!(
            self.ends(l).len > 0,
            "a linked frame is counted in its list"
        );
        self.ends(l).len -= 1;
        let e = *self.ends(l);
        assert!(
            (e.len == 0) == (e.head == NIL && e.tail == NIL),
            "a list is empty exactly when it has no ends"
        );
        self.prev[f.index()] = NIL;
        self.next[f.index()] = NIL;
        self.list[f.index()] = List::None;
    }

    fn push_head(&mut self, l: List, f: FrameIndex) {
        assert_eq!(self.list[f.index()], List::None, "a frame is on one list");
        let head = self.ends(l).head;
        self.prev[f.index()] = NIL;
        self.next[f.index()] = head;
        if head != NIL {
            self.prev[head.index()] = f;
        }
        let e = self.ends(l);
        e.head = f;
        if e.tail == NIL {
            e.tail = f;
        }
        e.len += 1;
        self.list[f.index()] = l;
    }

    fn push_tail(&mut self, l: List, f: FrameIndex) {
        assert_eq!(self.list[f.index()], List::None, "a frame is on one list");
        let tail = self.ends(l).tail;
        self.next[f.index()] = NIL;
        self.prev[f.index()] = tail;
        if tail != NIL {
            self.next[tail.index()] = f;
        }
        let e = self.ends(l);
        e.tail = f;
        if e.head == NIL {
            e.head = f;
        }
        e.len += 1;
        self.list[f.index()] = l;
    }

    /// A page was just loaded into frame `f`.
    pub fn loaded(&mut self, f: FrameIndex, access: Access) {
        assert!(
            self.list[f.index()] != List::Protected,
            "a frame is loaded after it left its page, and protected with it"
        );
        self.used[f.index()] = self.pass;
        self.unlink(f);
        match access {
            Access::Normal => self.push_head(List::Probation, f),
            Access::Scan => self.push_tail(List::Probation, f),
        }
    }

    /// The page in frame `f` was accessed again. Returns the frame a
    /// promotion pushed out of protected, if any (at most one: protected
    /// was full at most).
    #[must_use = "a frame pushed out of protected loses its promotion mark"]
    pub fn touched(&mut self, f: FrameIndex, access: Access) -> Option<FrameIndex> {
        self.used[f.index()] = self.pass;
        match (self.list[f.index()], access) {
            (_, Access::Scan) | (List::None, _) => None,
            (List::Protected, Access::Normal) if self.protected.head == f => None,
            (_, Access::Normal) => {
                self.unlink(f);
                self.push_head(List::Protected, f);
                assert!(
                    self.protected.len <= self.protected_max + 1,
                    "protected overflows by the one frame just promoted at most"
                );
                (self.protected.len > self.protected_max).then(|| {
                    let t = self.protected.tail;
                    self.unlink(t);
                    self.push_head(List::Probation, t);
                    assert!(self.protected.len <= self.protected_max);
                    t
                })
            }
        }
    }

    /// Whether frame `f` is in protected.
    pub fn is_protected(&self, f: FrameIndex) -> bool {
        self.list[f.index()] == List::Protected
    }

    /// The cleaner's pass under way.
    pub fn pass(&self) -> u64 {
        self.pass
    }

    /// Frame `f` no longer holds a page.
    pub fn removed(&mut self, f: FrameIndex) {
        self.unlink(f);
    }

    /// Candidate victims, coldest first: probation tail to head, then protected.
    pub fn coldest(&self) -> impl Iterator<Item = FrameIndex> + '_ {
        let walk = |start: FrameIndex| {
            std::iter::successors((start != NIL).then_some(start), move |&f| {
                let p = self.prev[f.index()];
                (p != NIL).then_some(p)
            })
        };
        walk(self.probation.tail).chain(walk(self.protected.tail))
    }

    /// Frames in protected.
    #[cfg(test)]
    pub fn protected_len(&self) -> usize {
        self.protected.len
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fr(i: u32) -> FrameIndex {
        FrameIndex::new(i)
    }

    #[test]
    fn a_frame_is_cold_only_after_a_whole_pass_unused() {
        let mut r = Replacer::new(4);
        r.loaded(fr(0), Access::Normal);
        r.loaded(fr(1), Access::Normal);
        let p1 = r.begin_pass();
        assert!(!r.unused_since_last_pass(fr(0), p1), "used just before");
        assert_eq!(r.touched(fr(0), Access::Normal), None);
        let p2 = r.begin_pass();
        assert!(!r.unused_since_last_pass(fr(0), p2), "used during pass 1");
        assert!(
            r.unused_since_last_pass(fr(1), p2),
            "unused since pass 1 began"
        );
        assert_eq!(r.touched(fr(1), Access::Scan), None);
        let p3 = r.begin_pass();
        assert!(
            !r.unused_since_last_pass(fr(1), p3),
            "a scan's access counts"
        );
        assert!(r.unused_since_last_pass(fr(0), p3));
    }

    #[test]
    fn scans_never_promote_and_go_first() {
        let mut r = Replacer::new(8);
        for i in 0..4 {
            r.loaded(fr(i), Access::Normal);
            assert_eq!(r.touched(fr(i), Access::Normal), None);
        }
        assert_eq!(r.protected_len(), 4);
        for i in 4..8 {
            r.loaded(fr(i), Access::Scan);
            assert_eq!(r.touched(fr(i), Access::Scan), None);
        }
        assert_eq!(r.protected_len(), 4);
        let order: Vec<u32> = r.coldest().map(FrameIndex::get).collect();
        assert_eq!(order.len(), 8);
        assert!(order[..4].iter().all(|&f| f >= 4), "{order:?}");
        r.removed(fr(5));
        assert_eq!(r.coldest().count(), 7);
    }

    #[test]
    fn protected_overflow_is_demoted() {
        let mut r = Replacer::new(8);
        for i in 0..8 {
            r.loaded(fr(i), Access::Normal);
            // Protected holds 5: each promotion past that pushes out the
            // oldest promoted, and says which.
            let pushed = r.touched(fr(i), Access::Normal);
            assert_eq!(pushed, i.checked_sub(5).map(fr), "promotion of {i}");
        }
        assert_eq!(r.protected_len(), 5);
        // The oldest promoted are the coldest now.
        assert_eq!(r.coldest().next(), Some(fr(0)));
    }
}
