//! Integration tests: the real binary against fixture roots and overlays built in code.

mod support;

mod agree;
mod bad_inputs;
mod command;
mod containers;
mod detect;
mod docker;
mod exec;
mod first_contact;
mod fleet;
mod gpu_code;
mod hardening;
mod hostile;
mod hostile6;
mod image;
mod infera_layout;
mod init;
mod multinode;
mod payload;
mod planning;
mod planted;
mod prefetch;
mod preflight;
mod recipes;
mod refuse;
mod releases;
mod shape;
mod snapshots;
mod stack;
mod startup;
