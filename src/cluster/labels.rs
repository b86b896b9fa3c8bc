//! The labels of a cached pod: [`CompactLabels`] (how a trimmed pod keeps them) and
//! [`PodLabels`] (either form, read alike).

use std::collections::BTreeMap;

/// Labels stored in two allocations whatever their number: the keys and values back to back in
/// one string, and where each ends. A `BTreeMap<String, String>` allocates a node sized for
/// eleven pairs even for one label (over 500 bytes) plus two strings per pair; in the pod cache,
/// with hundreds of thousands of pods, that was a quarter of each pod's footprint.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CompactLabels {
    /// `key0 value0 key1 value1 …`, without separators, pairs sorted by key.
    text: Box<str>,
    /// End of each key and value in `text`.
    ends: Box<[u32]>,
}

impl CompactLabels {
    /// The labels of `map`, in its (key) order.
    pub fn from_map(map: BTreeMap<String, String>) -> Self {
        let len: usize = map.iter().map(|(k, v)| k.len() + v.len()).sum();
        // Offsets are u32: labels of one object are far below 4 GiB (kube-apiserver caps the
        // metadata at 256 KiB); should that ever not hold, keep nothing rather than wrong pairs.
        if u32::try_from(len).is_err() {
            return Self::default();
        }
        let mut text = String::with_capacity(len);
        let mut ends = Vec::with_capacity(map.len() * 2);
        for (k, v) in &map {
            text.push_str(k);
            ends.push(text.len() as u32);
            text.push_str(v);
            ends.push(text.len() as u32);
        }
        Self {
            text: text.into_boxed_str(),
            ends: ends.into_boxed_slice(),
        }
    }

    /// Number of labels.
    pub fn len(&self) -> usize {
        self.ends.len() / 2
    }

    /// True when there is no label.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// The `i`th pair in key order.
    fn pair(&self, i: usize) -> (&str, &str) {
        let start = if i == 0 {
            0
        } else {
            self.ends[2 * i - 1] as usize
        };
        let key_end = self.ends[2 * i] as usize;
        let end = self.ends[2 * i + 1] as usize;
        (&self.text[start..key_end], &self.text[key_end..end])
    }

    /// Every pair, in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        (0..self.len()).map(|i| self.pair(i))
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        let (mut lo, mut hi) = (0, self.len());
        while lo < hi {
            let mid = (lo + hi) / 2;
            let (k, v) = self.pair(mid);
            match k.cmp(key) {
                std::cmp::Ordering::Equal => return Some(v),
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
            }
        }
        None
    }
}

/// The labels of a pod, wherever they are kept (see [`CachedPod::labels`]); iteration is in key
/// order either way.
#[derive(Clone, Copy, Debug)]
pub enum PodLabels<'a> {
    /// An untrimmed pod's `metadata.labels`.
    Map(&'a BTreeMap<String, String>),
    /// A trimmed pod's [`CompactLabels`].
    Compact(&'a CompactLabels),
}

impl<'a> PodLabels<'a> {
    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&'a str> {
        match *self {
            PodLabels::Map(m) => m.get(key).map(String::as_str),
            PodLabels::Compact(c) => c.get(key),
        }
    }

    /// Every pair, in key order.
    pub fn iter(&self) -> Box<dyn Iterator<Item = (&'a str, &'a str)> + 'a> {
        match *self {
            PodLabels::Map(m) => Box::new(m.iter().map(|(k, v)| (k.as_str(), v.as_str()))),
            PodLabels::Compact(c) => Box::new(c.iter()),
        }
    }

    /// True when there is no label.
    pub fn is_empty(&self) -> bool {
        match *self {
            PodLabels::Map(m) => m.is_empty(),
            PodLabels::Compact(c) => c.is_empty(),
        }
    }

    /// The labels as a map.
    pub fn to_map(&self) -> BTreeMap<String, String> {
        self.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }
}

impl crate::selector::LabelSource for PodLabels<'_> {
    fn label(&self, key: &str) -> Option<&str> {
        self.get(key)
    }
}
