//! `codec FILE...`: decompress each blob (gzip or zstd by its magic) to nothing, on this one
//! thread, with the decoders `check --image` uses and the same 1 MiB input buffer; prints
//! the uncompressed bytes.

use std::io::{BufRead, BufReader, Read};

fn main() -> std::io::Result<()> {
    let mut total = 0u64;
    for path in std::env::args().skip(1) {
        let mut blob = BufReader::with_capacity(1 << 20, std::fs::File::open(&path)?);
        let magic = blob.fill_buf()?.get(..4).map(<[u8]>::to_vec).unwrap_or_default();
        let mut decoded: Box<dyn Read> = match magic.as_slice() {
            [0x1f, 0x8b, ..] => Box::new(flate2::bufread::MultiGzDecoder::new(blob)),
            [0x28, 0xb5, 0x2f, 0xfd] => Box::new(zstd::Decoder::with_buffer(blob)?),
            _ => return Err(std::io::Error::other(format!("{path}: neither gzip nor zstd"))),
        };
        total += std::io::copy(&mut decoded, &mut std::io::sink())?;
    }
    println!("{total}");
    Ok(())
}
