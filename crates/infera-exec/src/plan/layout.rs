//! The layouts a hint may name: the fewest GPUs that hold a checkpoint, as a tensor parallel
//! size the model allows. Below the rules' hints and the memory check alike.

/// The most attention heads a divisor is looked for among: more than any model has (the
/// largest have 128); a config claiming more gets the bytes' count alone.
const MAX_HEADS: u64 = 1 << 16;

/// The fewest GPUs that hold `bytes` at `room` each (a GPU's memory, or the engine's share
/// of it, so that the hint does not lead into `kv-cache-no-room`), as a tensor parallel size
/// the model's attention heads allow (one that divides them: a hint to 5 GPUs for 64 heads
/// would only lead to `tp-does-not-divide-heads`); and what says so.
pub(super) fn need(bytes: u64, room: u64, heads: Option<u64>) -> (u64, String) {
    // The weights and at least a little KV cache: strictly more room than the bytes.
    let least = (bytes / room.max(1)).saturating_add(1);
    match heads.filter(|h| *h >= least && *h <= MAX_HEADS) {
        Some(h) => {
            let tp = (least..=h).find(|t| h % t == 0).unwrap_or(h);
            let why = if tp > least {
                format!(", as a size that divides the model's {h} attention heads")
            } else {
                String::new()
            };
            (tp, why)
        }
        None => (least, String::new()),
    }
}

#[cfg(test)]
mod tests {
    use super::need;

    const GIB: u64 = 1 << 30;

    #[test]
    fn the_gpus_a_hint_names_are_a_layout_the_model_allows() {
        // 1397 GiB over 288 GiB GPUs: 5 by the bytes, but 64 heads divide by 8, not 5.
        let (n, why) = need(1397 * GIB, 288 * GIB, Some(64));
        assert_eq!((n, why.as_str()), (8, ", as a size that divides the model's 64 attention heads"));
        assert_eq!(need(1397 * GIB, 192 * GIB, Some(64)).0, 8);
        // vLLM's 0.9 of an MI300X: 8 would leave no KV room, 16 does.
        assert_eq!(need(1397 * GIB, 192 * GIB * 9 / 10, Some(64)).0, 16);
        assert_eq!(need(1000 * GIB, 192 * GIB, Some(96)), (6, String::new()));
        // Heads unknown, or fewer than the GPUs the bytes need: the bytes alone.
        assert_eq!(need(1397 * GIB, 288 * GIB, None), (5, String::new()));
        assert_eq!(need(1397 * GIB, 8 * GIB, Some(64)), (175, String::new()));
        // Bytes that fill the GPUs exactly leave no room: one more.
        assert_eq!(need(2 * GIB, GIB, None).0, 3);
    }

    #[test]
    fn a_head_count_no_model_has_answers_at_once() {
        assert_eq!(need(1397 * GIB, 288 * GIB, Some(2_147_483_647)), (5, String::new()));
        assert_eq!(need(u64::MAX, 1, Some(u64::MAX)), (u64::MAX, String::new()));
    }
}
