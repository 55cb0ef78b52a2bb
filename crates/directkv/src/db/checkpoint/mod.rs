//! Checkpoints and what they keep: the checkpoint itself and log-space
//! pacing ([`run`]), the part of the engine's state it owns ([`state`]),
//! the control file that names the last one ([`control`]), the summaries
//! of the pages changed between them ([`summary`]), and the background
//! threads that run them, clean and read ahead ([`background`]).

pub(crate) mod background;
pub(crate) mod control;
pub(crate) mod run;
pub(crate) mod state;
pub(crate) mod summary;
