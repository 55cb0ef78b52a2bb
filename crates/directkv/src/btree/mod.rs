//! The B+tree: slotted pages and the tree operations on them.
//!
//! `node` is the page layout (`node_split` its split); `tree` the limits, the page-store traits and
//! lookups, and the home of every tree operation's public name; `descent`,
//! `scan`, `insert`, `delete` and `overflow` are the operations.

mod delete;
mod descent;
mod insert;
pub mod node;
mod node_split;
mod overflow;
mod relocate;
mod scan;
pub mod tree;
