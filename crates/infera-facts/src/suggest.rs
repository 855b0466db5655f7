//! "Did you mean": the closest of the names a value could have been, measured as clap
//! measures its own suggestions (Jaro-Winkler similarity above 0.7).

/// The candidate closest to `word`, when one is close enough: the shortest that begins with
/// it (a name cut short), else the most similar.
pub fn closest<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let candidates: Vec<&str> = candidates.into_iter().collect();
    let cut_short = candidates.iter().filter(|c| word.len() >= 3 && c.starts_with(word)).min_by_key(|c| c.len());
    cut_short.copied().or_else(|| {
        candidates
            .into_iter()
            .map(|c| (strsim::jaro_winkler(word, c), c))
            .filter(|(score, _)| *score > 0.7)
            .max_by(|a, b| a.0.total_cmp(&b.0))
            .map(|(_, c)| c)
    })
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
        assert_eq!(closest("net_bind", ["net_admin", "net_bind_service", "net_raw"]), Some("net_bind_service"));
        assert_eq!(
            did_you_mean("kv-cache-fp8", ["kv-cache-fp8-mla"]).as_deref(),
            Some("did you mean `kv-cache-fp8-mla`?")
        );
    }
}
