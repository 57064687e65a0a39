//! Just enough PNG to look at a screenshot: 8-bit RGB or RGBA, not interlaced; zlib inflate
//! (stored, fixed and dynamic Huffman blocks) and the five scanline filters. No crate in the
//! lock file decodes PNG, and a test should not add one.

pub struct Image {
    pub width: usize,
    pub height: usize,
    /// RGB triples, row by row.
    pub rgb: Vec<[u8; 3]>,
}

pub fn decode(bytes: &[u8]) -> Result<Image, String> {
    const SIGNATURE: &[u8] = b"\x89PNG\r\n\x1a\n";
    let mut rest = bytes.strip_prefix(SIGNATURE).ok_or("not a PNG")?;
    let (mut width, mut height, mut channels) = (0, 0, 0);
    let mut data = Vec::new();
    while rest.len() >= 12 {
        let len = u32::from_be_bytes(rest[0..4].try_into().unwrap()) as usize;
        let kind = &rest[4..8];
        let body = rest.get(8..8 + len).ok_or("truncated chunk")?;
        match kind {
            b"IHDR" => {
                width = u32::from_be_bytes(body[0..4].try_into().unwrap()) as usize;
                height = u32::from_be_bytes(body[4..8].try_into().unwrap()) as usize;
                let (depth, colour, interlace) = (body[8], body[9], body[12]);
                channels = match (depth, colour, interlace) {
                    (8, 2, 0) => 3,
                    (8, 6, 0) => 4,
                    _ => {
                        return Err(format!(
                            "unsupported PNG: depth {depth}, colour type {colour}, interlace {interlace}"
                        ));
                    }
                };
            }
            b"IDAT" => data.extend_from_slice(body),
            b"IEND" => break,
            _ => {}
        }
        rest = &rest[12 + len..];
    }
    if channels == 0 {
        return Err("no IHDR".into());
    }
    let raw = inflate(data.get(2..).ok_or("no zlib header")?)?;
    let stride = width * channels;
    if raw.len() < height * (stride + 1) {
        return Err(format!(
            "{} bytes of pixels, want {}",
            raw.len(),
            height * (stride + 1)
        ));
    }
    let mut rows = vec![0u8; height * stride];
    for y in 0..height {
        let filter = raw[y * (stride + 1)];
        let line = &raw[y * (stride + 1) + 1..(y + 1) * (stride + 1)];
        for x in 0..stride {
            let a = if x >= channels {
                rows[y * stride + x - channels]
            } else {
                0
            };
            let b = if y > 0 { rows[(y - 1) * stride + x] } else { 0 };
            let c = if x >= channels && y > 0 {
                rows[(y - 1) * stride + x - channels]
            } else {
                0
            };
            let predicted = match filter {
                0 => 0,
                1 => a,
                2 => b,
                3 => ((a as u16 + b as u16) / 2) as u8,
                4 => paeth(a, b, c),
                f => return Err(format!("filter {f}")),
            };
            rows[y * stride + x] = line[x].wrapping_add(predicted);
        }
    }
    let rgb = rows
        .chunks_exact(channels)
        .map(|p| [p[0], p[1], p[2]])
        .collect();
    Ok(Image { width, height, rgb })
}

fn paeth(a: u8, b: u8, c: u8) -> u8 {
    let p = a as i16 + b as i16 - c as i16;
    let (pa, pb, pc) = (
        (p - a as i16).abs(),
        (p - b as i16).abs(),
        (p - c as i16).abs(),
    );
    if pa <= pb && pa <= pc {
        a
    } else if pb <= pc {
        b
    } else {
        c
    }
}

struct Bits<'a> {
    data: &'a [u8],
    at: usize,
}

impl Bits<'_> {
    fn bit(&mut self) -> Result<u32, String> {
        let byte = *self
            .data
            .get(self.at / 8)
            .ok_or("deflate stream ends early")?;
        let bit = (byte >> (self.at % 8)) & 1;
        self.at += 1;
        Ok(bit as u32)
    }

    fn bits(&mut self, n: u32) -> Result<u32, String> {
        let mut v = 0;
        for i in 0..n {
            v |= self.bit()? << i;
        }
        Ok(v)
    }
}

/// Canonical Huffman code: symbols by code length, counts per length.
struct Huffman {
    counts: [u16; 16],
    symbols: Vec<u16>,
}

impl Huffman {
    fn new(lengths: &[u8]) -> Huffman {
        let mut counts = [0u16; 16];
        for &l in lengths {
            counts[l as usize] += 1;
        }
        counts[0] = 0;
        let mut offsets = [0u16; 16];
        for i in 1..16 {
            offsets[i] = offsets[i - 1] + counts[i - 1];
        }
        let mut symbols = vec![0u16; lengths.len()];
        for (s, &l) in lengths.iter().enumerate() {
            if l != 0 {
                symbols[offsets[l as usize] as usize] = s as u16;
                offsets[l as usize] += 1;
            }
        }
        Huffman { counts, symbols }
    }

    fn decode(&self, bits: &mut Bits) -> Result<u16, String> {
        let (mut code, mut first, mut index) = (0i32, 0i32, 0i32);
        for len in 1..16 {
            code |= bits.bit()? as i32;
            let count = self.counts[len] as i32;
            if code - count < first {
                return Ok(self.symbols[(index + code - first) as usize]);
            }
            index += count;
            first += count;
            first <<= 1;
            code <<= 1;
        }
        Err("bad Huffman code".into())
    }
}

const LENGTH_BASE: [u16; 29] = [
    3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 17, 19, 23, 27, 31, 35, 43, 51, 59, 67, 83, 99, 115, 131,
    163, 195, 227, 258,
];
const LENGTH_EXTRA: [u8; 29] = [
    0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0,
];
const DIST_BASE: [u16; 30] = [
    1, 2, 3, 4, 5, 7, 9, 13, 17, 25, 33, 49, 65, 97, 129, 193, 257, 385, 513, 769, 1025, 1537,
    2049, 3073, 4097, 6145, 8193, 12289, 16385, 24577,
];
const DIST_EXTRA: [u8; 30] = [
    0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13,
    13,
];

fn inflate(data: &[u8]) -> Result<Vec<u8>, String> {
    let mut bits = Bits { data, at: 0 };
    let mut out = Vec::new();
    loop {
        let last = bits.bit()?;
        match bits.bits(2)? {
            0 => {
                bits.at = bits.at.div_ceil(8) * 8;
                let at = bits.at / 8;
                let len = u16::from_le_bytes([data[at], data[at + 1]]) as usize;
                let body = data
                    .get(at + 4..at + 4 + len)
                    .ok_or("stored block ends early")?;
                out.extend_from_slice(body);
                bits.at = (at + 4 + len) * 8;
            }
            1 => {
                let mut lengths = [8u8; 288];
                lengths[144..256].fill(9);
                lengths[256..280].fill(7);
                codes(
                    &mut bits,
                    &mut out,
                    &Huffman::new(&lengths),
                    &Huffman::new(&[5; 30]),
                )?;
            }
            2 => {
                let (literals, distances) = dynamic_tables(&mut bits)?;
                codes(&mut bits, &mut out, &literals, &distances)?;
            }
            _ => return Err("bad block type".into()),
        }
        if last == 1 {
            return Ok(out);
        }
    }
}

fn dynamic_tables(bits: &mut Bits) -> Result<(Huffman, Huffman), String> {
    const ORDER: [usize; 19] = [
        16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15,
    ];
    let literal_count = bits.bits(5)? as usize + 257;
    let distance_count = bits.bits(5)? as usize + 1;
    let code_count = bits.bits(4)? as usize + 4;
    let mut code_lengths = [0u8; 19];
    for &i in &ORDER[..code_count] {
        code_lengths[i] = bits.bits(3)? as u8;
    }
    let code = Huffman::new(&code_lengths);
    let mut lengths = Vec::with_capacity(literal_count + distance_count);
    while lengths.len() < literal_count + distance_count {
        let (value, repeat) = match code.decode(bits)? {
            s @ 0..=15 => (s as u8, 1),
            16 => (
                *lengths.last().ok_or("repeat with nothing before")?,
                3 + bits.bits(2)?,
            ),
            17 => (0, 3 + bits.bits(3)?),
            18 => (0, 11 + bits.bits(7)?),
            _ => return Err("bad code length symbol".into()),
        };
        lengths.extend(std::iter::repeat_n(value, repeat as usize));
    }
    Ok((
        Huffman::new(&lengths[..literal_count]),
        Huffman::new(&lengths[literal_count..]),
    ))
}

fn codes(
    bits: &mut Bits,
    out: &mut Vec<u8>,
    literals: &Huffman,
    distances: &Huffman,
) -> Result<(), String> {
    loop {
        let symbol = literals.decode(bits)? as usize;
        match symbol {
            0..=255 => out.push(symbol as u8),
            256 => return Ok(()),
            257..=285 => {
                let i = symbol - 257;
                let len = LENGTH_BASE[i] as usize + bits.bits(LENGTH_EXTRA[i] as u32)? as usize;
                let d = distances.decode(bits)? as usize;
                let dist = *DIST_BASE.get(d).ok_or("bad distance")? as usize
                    + bits.bits(DIST_EXTRA[d] as u32)? as usize;
                let from = out
                    .len()
                    .checked_sub(dist)
                    .ok_or("distance before the start")?;
                for k in 0..len {
                    out.push(out[from + k]);
                }
            }
            _ => return Err("bad literal/length symbol".into()),
        }
    }
}
