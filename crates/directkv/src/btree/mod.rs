//! The B+tree: slotted pages and the tree operations on them.

pub mod node;
pub mod tree;
