//! [`PluginId`] and [`PluginSet`]: the plugin ids an item carries (its rejectors, its pending
//! plugins).

/// The id of a caller-defined "plugin": whatever rejected an item, gates it, or hints about it.
///
/// Plugin ids are static names, so they are cheap to copy and compare.
pub type PluginId = &'static str;

/// A set of plugin ids, kept in the item's bookkeeping up to two (the common case), so a move
/// reads an item's rejectors where it reads its other marks; boxed beyond two.
#[derive(Debug, Clone, Default)]
pub(crate) struct PluginSet {
    inline: [PluginId; 2],
    len: u8,
    /// All the ids once there are more than two.
    #[expect(
        clippy::box_collection,
        reason = "a thin pointer keeps the set at 48 bytes (a `Vec` or boxed slice: 56)"
    )]
    spill: Option<Box<Vec<PluginId>>>,
}

impl PluginSet {
    pub(crate) const EMPTY: PluginSet = PluginSet {
        inline: ["", ""],
        len: 0,
        spill: None,
    };

    pub(crate) fn as_slice(&self) -> &[PluginId] {
        match &self.spill {
            Some(all) => all,
            None => &self.inline[..usize::from(self.len)],
        }
    }

    pub(crate) fn contains(&self, plugin: &PluginId) -> bool {
        self.as_slice().contains(plugin)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0 && self.spill.is_none()
    }

    /// Adds `plugin` unless present.
    pub(crate) fn push(&mut self, plugin: PluginId) {
        if self.contains(&plugin) {
            return;
        }
        if let Some(all) = &mut self.spill {
            all.push(plugin);
        } else if usize::from(self.len) < self.inline.len() {
            self.inline[usize::from(self.len)] = plugin;
            self.len += 1;
        } else {
            let mut all = self.inline.to_vec();
            all.push(plugin);
            self.spill = Some(Box::new(all));
        }
    }
}

impl FromIterator<PluginId> for PluginSet {
    fn from_iter<I: IntoIterator<Item = PluginId>>(iter: I) -> Self {
        let mut set = PluginSet::default();
        for plugin in iter {
            set.push(plugin);
        }
        set
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plugin_sets_keep_order_without_duplicates_inline_and_spilled() {
        let mut set: PluginSet = ["a", "b", "a"].into_iter().collect();
        assert_eq!(set.as_slice(), ["a", "b"]);
        assert!(set.spill.is_none());
        set.push("c");
        set.push("b");
        assert_eq!(set.as_slice(), ["a", "b", "c"]);
        assert!(set.contains(&"c") && !set.contains(&"d") && !set.is_empty());
        assert!(PluginSet::default().is_empty());
    }
}
