//! "Did you mean": the closest of the names a value could have been, measured as clap
//! measures its own suggestions (Jaro-Winkler similarity above 0.7).

/// The candidate closest to `word`, when one is close enough.
pub fn closest<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    candidates
        .into_iter()
        .map(|c| (strsim::jaro_winkler(word, c), c))
        .filter(|(score, _)| *score > 0.7)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, c)| c)
}

/// `did you mean `x`?`
pub fn did_you_mean<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<String> {
    closest(word, candidates).map(|c| format!("did you mean `{c}`?"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn close_names_only() {
        assert_eq!(closest("moonckae", ["hipfile", "mooncake", "kvd"]), Some("mooncake"));
        assert_eq!(closest("wroker", ["worker", "server", "check"]), Some("worker"));
        assert_eq!(closest("gpu", ["mooncake", "hipfile"]), None);
        assert_eq!(
            did_you_mean("kv-cache-fp8", ["kv-cache-fp8-mla"]).as_deref(),
            Some("did you mean `kv-cache-fp8-mla`?")
        );
    }
}
