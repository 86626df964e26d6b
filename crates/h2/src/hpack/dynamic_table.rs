//! The dynamic table (RFC 7541 sections 2.3.2 and 4): entries newest first, their size
//! (4.1), and eviction when the maximum size drops (4.3) or an entry is added (4.4).
//! The decoder and the encoder each keep one, and keep them equal by following the
//! same rules.

use std::collections::VecDeque;

use bytes::{Bytes, BytesMut};

/// One entry of the table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry {
    pub name: Bytes,
    pub value: Bytes,
}

/// The size section 4.1 gives an entry: its name and value lengths plus 32 (the
/// overhead RFC 7541 counts for each entry). Saturates rather than overflows.
pub(crate) fn entry_size(name_len: usize, value_len: usize) -> usize {
    name_len.saturating_add(value_len).saturating_add(32)
}

/// `name` and `value` copied into one new buffer and sliced out of it: an entry that
/// holds no other bytes alive.
pub(crate) fn copy_together(name: &[u8], value: &[u8]) -> (Bytes, Bytes) {
    let mut both = BytesMut::with_capacity(name.len().saturating_add(value.len()));
    both.extend_from_slice(name);
    both.extend_from_slice(value);
    let value = both.split_off(name.len());
    (both.freeze(), value.freeze())
}

/// The dynamic table of one side of a connection.
#[derive(Debug, Clone)]
pub(crate) struct DynamicTable {
    /// Newest first: dynamic index 62 is `entries[0]`.
    entries: VecDeque<Entry>,
    /// The sum of the entries' sizes.
    size_bytes: usize,
    /// The size the last table size update set (or the initial size).
    max_size_bytes: usize,
    /// How many entries were ever added, wrapping: the encoder's index names an entry
    /// by its number, which does not change as newer entries push it down.
    added_count: u32,
}

impl DynamicTable {
    pub(crate) fn new(max_size_bytes: usize) -> DynamicTable {
        DynamicTable { entries: VecDeque::new(), size_bytes: 0, max_size_bytes, added_count: 0 }
    }

    /// The entry at `position` (0 = newest, dynamic index 62).
    pub(crate) fn get(&self, position: usize) -> Option<&Entry> {
        self.entries.get(position)
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    pub(crate) fn size_bytes(&self) -> usize {
        self.size_bytes
    }

    pub(crate) fn max_size_bytes(&self) -> usize {
        self.max_size_bytes
    }

    pub(crate) fn added_count(&self) -> u32 {
        self.added_count
    }

    /// The entries, newest first.
    #[cfg(test)]
    pub(crate) fn entries(&self) -> impl Iterator<Item = &Entry> {
        self.entries.iter()
    }

    /// Applies a new maximum size, evicting the oldest entries until the table fits
    /// (section 4.3).
    pub(crate) fn set_max_size(&mut self, max_size_bytes: usize) {
        self.max_size_bytes = max_size_bytes;
        self.evict_to(max_size_bytes);
    }

    /// Adds an entry (section 4.4): the oldest entries are evicted until it fits; an
    /// entry larger than the maximum size empties the table and is not added. Returns
    /// whether it was added.
    pub(crate) fn add(&mut self, name: Bytes, value: Bytes) -> bool {
        let size = entry_size(name.len(), value.len());
        let Some(room) = self.max_size_bytes.checked_sub(size) else {
            self.evict_to(0);
            return false;
        };
        self.evict_to(room);
        self.entries.push_front(Entry { name, value });
        self.size_bytes = self.size_bytes.saturating_add(size);
        self.added_count = self.added_count.wrapping_add(1);
        true
    }

    fn evict_to(&mut self, size_bytes: usize) {
        while self.size_bytes > size_bytes {
            let Some(oldest) = self.entries.pop_back() else {
                self.size_bytes = 0;
                break;
            };
            self.size_bytes =
                self.size_bytes.saturating_sub(entry_size(oldest.name.len(), oldest.value.len()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn add(table: &mut DynamicTable, name: &'static str, value: &'static str) -> bool {
        table.add(Bytes::from_static(name.as_bytes()), Bytes::from_static(value.as_bytes()))
    }

    fn names(table: &DynamicTable) -> Vec<&[u8]> {
        table.entries().map(|entry| &entry.name[..]).collect()
    }

    #[test]
    fn entries_are_newest_first_and_sized_per_section_4_1() {
        let mut table = DynamicTable::new(4096);
        assert!(add(&mut table, "a", "1"));
        assert!(add(&mut table, "bb", "22"));
        assert_eq!(names(&table), [&b"bb"[..], b"a"]);
        assert_eq!(table.size_bytes(), 34 + 36);
        assert_eq!(table.get(1).unwrap().value, "1");
        assert_eq!(table.get(2), None);
        assert_eq!(table.added_count(), 2);
    }

    #[test]
    fn adding_evicts_the_oldest_until_the_entry_fits() {
        // Three entries of 40 bytes in 100: the third evicts the first.
        let mut table = DynamicTable::new(100);
        assert!(add(&mut table, "aaaa", "1111"));
        assert!(add(&mut table, "bbbb", "2222"));
        assert!(add(&mut table, "cccc", "3333"));
        assert_eq!(names(&table), [&b"cccc"[..], b"bbbb"]);
        assert_eq!(table.size_bytes(), 80);
    }

    #[test]
    fn an_entry_exactly_the_maximum_size_fits_alone() {
        let mut table = DynamicTable::new(40);
        assert!(add(&mut table, "aaaa", "1111"));
        assert!(add(&mut table, "bbbb", "2222"));
        assert_eq!(names(&table), [&b"bbbb"[..]]);
        assert_eq!(table.size_bytes(), 40);
    }

    #[test]
    fn an_entry_larger_than_the_table_empties_it_and_is_not_added() {
        let mut table = DynamicTable::new(40);
        assert!(add(&mut table, "aaaa", "1111"));
        assert!(!add(&mut table, "aaaa", "11111"));
        assert_eq!(table.len(), 0);
        assert_eq!(table.size_bytes(), 0);
        assert_eq!(table.added_count(), 1);
    }

    #[test]
    fn a_smaller_maximum_evicts_and_zero_empties() {
        let mut table = DynamicTable::new(4096);
        for _ in 0..10 {
            add(&mut table, "aaaa", "1111");
        }
        table.set_max_size(100);
        assert_eq!(table.len(), 2);
        assert_eq!(table.size_bytes(), 80);
        table.set_max_size(0);
        assert_eq!(table.len(), 0);
        assert!(!add(&mut table, "", ""));
        table.set_max_size(4096);
        assert_eq!(table.max_size_bytes(), 4096);
        assert!(add(&mut table, "", ""));
        assert_eq!(table.size_bytes(), 32);
    }
}
