//! The engines a tree can carry a module for and the overlay patches for: their names and
//! the module of infera that wraps each. The launcher's engine table (infera-exec's
//! `engines/`) holds everything else it knows of them; a test there keeps the two the same.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EngineId {
    pub name: &'static str,
    /// infera's wrapper of the engine (`python -m <module>`).
    pub module: &'static str,
}

pub const ENGINES: &[EngineId] = &[
    EngineId { name: "vllm", module: "infera.engine.vllm" },
    EngineId { name: "sglang", module: "infera.engine.sglang" },
];

pub fn names() -> Vec<&'static str> {
    ENGINES.iter().map(|e| e.name).collect()
}

pub fn by_name(name: &str) -> Option<&'static EngineId> {
    ENGINES.iter().find(|e| e.name == name)
}
