//! Walking JSON without building it: the cursor over a frame's top-level keys, and the
//! nesting of a value being skipped.

use super::number::digit_run;
use super::skip::{BLOCK, block_masks, find_quote_or_backslash, prefix_xor};
use super::{Fields, MAX_NESTING, ScanError, Span};

pub(super) struct Cursor<'a> {
    pub(super) bytes: &'a [u8],
    pub(super) pos: usize,
}

impl<'a> Cursor<'a> {
    pub(super) fn truncated(&self) -> ScanError {
        ScanError::Truncated {
            offset: self.bytes.len(),
        }
    }

    pub(super) fn peek(&self) -> Result<u8, ScanError> {
        self.bytes
            .get(self.pos)
            .copied()
            .ok_or_else(|| self.truncated())
    }

    pub(super) fn unexpected(&self, found: u8, expected: &'static str) -> ScanError {
        ScanError::UnexpectedByte {
            offset: self.pos,
            found,
            expected,
        }
    }

    pub(super) fn skip_whitespace(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.bytes.get(self.pos) {
            self.pos += 1;
        }
    }

    /// Reads the object at the cursor, recording its keys of interest in `fields`. With
    /// `inner`, a `data` key holding an object is scanned into `inner` (one level only).
    pub(super) fn object(
        &mut self,
        fields: &mut Fields,
        mut inner: Option<&mut Fields>,
    ) -> Result<(), ScanError> {
        fields.start = self.pos;
        self.pos += 1; // the caller saw `{`
        self.skip_whitespace();
        if self.peek()? == b'}' {
            self.pos += 1;
            fields.end = self.pos;
            return Ok(());
        }
        loop {
            self.skip_whitespace();
            let key = self.key()?;
            self.skip_whitespace();
            match self.peek()? {
                b':' => self.pos += 1,
                other => return Err(self.unexpected(other, "`:` after an object key")),
            }
            self.skip_whitespace();
            let start = self.pos;
            if key == b"data"
                && let Some(inner) = inner.as_deref_mut()
            {
                fields.wrapped = self.peek()? == b'{';
                if fields.wrapped {
                    *inner = Fields::default();
                    self.object(inner, None)?;
                } else {
                    self.skip_value()?;
                }
            } else {
                let escaped = self.skip_value()?;
                let span = Some(Span {
                    start,
                    end: self.pos,
                    escaped,
                });
                match key {
                    b"e" => fields.event_type = span,
                    b"E" => fields.event_time = span,
                    b"T" => fields.transaction_time = span,
                    b"s" => fields.symbol = span,
                    b"U" => fields.first_update_id = span,
                    b"u" => fields.final_update_id = span,
                    b"pu" => fields.prev_final_update_id = span,
                    b"stream" => fields.stream = span,
                    _ => {}
                }
            }
            self.skip_whitespace();
            match self.peek()? {
                b',' => self.pos += 1,
                b'}' => {
                    self.pos += 1;
                    fields.end = self.pos;
                    return Ok(());
                }
                other => return Err(self.unexpected(other, "`,` or `}` after an object value")),
            }
        }
    }

    /// Reads an object key and returns its bytes without the quotes.
    pub(super) fn key(&mut self) -> Result<&'a [u8], ScanError> {
        let start = self.pos;
        // Binance's keys are one or two letters: take those without the general search.
        let plain = |byte: &u8| *byte != b'"' && *byte != b'\\';
        match self.bytes.get(start..start + 4) {
            Some([b'"', key @ .., b'"', _]) if key.iter().all(plain) => {
                self.pos = start + 3;
                return Ok(key);
            }
            Some([b'"', key @ .., b'"']) if key.iter().all(plain) => {
                self.pos = start + 4;
                return Ok(key);
            }
            _ => {}
        }
        let first = self.peek()?;
        if first != b'"' {
            return Err(self.unexpected(first, "`\"` opening an object key"));
        }
        if self.string()? {
            return Err(ScanError::EscapedKey { offset: start });
        }
        Ok(self.bytes.get(start + 1..self.pos - 1).unwrap_or_default())
    }

    /// Skips the string whose opening quote is at the cursor; returns whether it holds an escape.
    pub(super) fn string(&mut self) -> Result<bool, ScanError> {
        let mut from = self.pos + 1;
        let mut escaped = false;
        loop {
            let Some(at) = find_quote_or_backslash(self.bytes, from) else {
                return Err(self.truncated());
            };
            if self.bytes.get(at) == Some(&b'"') {
                self.pos = at + 1;
                return Ok(escaped);
            }
            // A backslash: the byte after it is escaped, whatever it is.
            escaped = true;
            from = at + 2;
        }
    }

    /// Skips one value; returns whether it was a string holding an escape sequence.
    pub(super) fn skip_value(&mut self) -> Result<bool, ScanError> {
        match self.peek()? {
            b'"' => return self.string(),
            b'{' | b'[' => self.skip_nested()?,
            b'-' | b'0'..=b'9' => {
                self.pos += digit_run(self.bytes.get(self.pos..).unwrap_or_default());
                while let Some(b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E') =
                    self.bytes.get(self.pos)
                {
                    self.pos += 1;
                }
            }
            b't' => self.literal(b"true")?,
            b'f' => self.literal(b"false")?,
            b'n' => self.literal(b"null")?,
            other => return Err(self.unexpected(other, "a JSON value")),
        }
        Ok(false)
    }

    pub(super) fn literal(&mut self, word: &'static [u8]) -> Result<(), ScanError> {
        let rest = self.bytes.get(self.pos..).unwrap_or_default();
        for (i, &want) in word.iter().enumerate() {
            match rest.get(i) {
                None => return Err(self.truncated()),
                Some(&have) if have != want => {
                    return Err(ScanError::UnexpectedByte {
                        offset: self.pos + i,
                        found: have,
                        expected: "a JSON literal",
                    });
                }
                Some(_) => {}
            }
        }
        self.pos += word.len();
        Ok(())
    }

    /// Skips the array or object opening at the cursor, checking only that brackets pair up
    /// outside strings.
    ///
    /// 64 bytes at a time: the block's quotes give, by prefix XOR, which of its bytes lie inside
    /// a string, and only the brackets outside strings are followed. A block holding a
    /// backslash goes one byte at a time; the last block of the input is padded with zeros.
    pub(super) fn skip_nested(&mut self) -> Result<(), ScanError> {
        let mut nesting = Nesting::default();
        let mut in_string = false;
        let mut pos = self.pos;
        loop {
            let padded;
            let (block, complete) = match self
                .bytes
                .get(pos..pos + BLOCK)
                .and_then(|chunk| <&[u8; BLOCK]>::try_from(chunk).ok())
            {
                Some(block) => (block, true),
                None => {
                    let mut tail = [0u8; BLOCK];
                    let rest = self.bytes.get(pos..).unwrap_or_default();
                    if let Some(head) = tail.get_mut(..rest.len()) {
                        head.copy_from_slice(rest);
                    }
                    padded = tail;
                    (&padded, false)
                }
            };
            let masks = block_masks(block);
            if masks.backslash {
                let until = pos + BLOCK;
                while pos < until {
                    if self.byte_step(&mut pos, &mut nesting, &mut in_string)? {
                        self.pos = pos;
                        return Ok(());
                    }
                }
                continue;
            }
            let inside = prefix_xor(masks.quotes) ^ 0u64.wrapping_sub(u64::from(in_string));
            let mut brackets = masks.brackets & !inside;
            while brackets != 0 {
                let at = brackets.trailing_zeros() as usize;
                brackets &= brackets - 1;
                let byte = block.get(at).copied().unwrap_or_default();
                if nesting.bracket(byte, pos + at)? {
                    self.pos = pos + at + 1;
                    return Ok(());
                }
            }
            if !complete {
                return Err(self.truncated());
            }
            in_string = inside >> 63 == 1;
            pos += BLOCK;
        }
    }

    /// Follows the byte at `pos` (and the byte it escapes); returns whether it closed the
    /// outermost level of `nesting`.
    pub(super) fn byte_step(
        &self,
        pos: &mut usize,
        nesting: &mut Nesting,
        in_string: &mut bool,
    ) -> Result<bool, ScanError> {
        let at = *pos;
        let Some(&byte) = self.bytes.get(at) else {
            return Err(self.truncated());
        };
        *pos += 1;
        match (*in_string, byte) {
            (_, b'"') => *in_string = !*in_string,
            (true, b'\\') => *pos += 1,
            (false, b'[' | b'{' | b']' | b'}') => return nesting.bracket(byte, at),
            _ => {}
        }
        Ok(false)
    }
}

/// The open arrays and objects of a value being skipped.
#[derive(Debug, Default)]
pub(super) struct Nesting {
    /// Bit `i` is set when the level `i` steps below the innermost is an object.
    objects: u64,
    depth: u32,
}

impl Nesting {
    /// Applies one of `[`, `{`, `]`, `}` outside strings; returns whether it closed the
    /// outermost level. `[` 0x5b and `{` 0x7b have bit 1 set, `]` 0x5d and `}` 0x7d do not,
    /// and bit 5 tells braces from square brackets.
    #[inline(always)]
    pub(super) fn bracket(&mut self, byte: u8, at: usize) -> Result<bool, ScanError> {
        let object = byte & 0x20 != 0;
        if byte & 0x02 != 0 {
            if self.depth == MAX_NESTING {
                return Err(ScanError::TooDeep { offset: at });
            }
            self.objects = (self.objects << 1) | u64::from(object);
            self.depth += 1;
            return Ok(false);
        }
        let open_object = self.objects & 1 == 1;
        if self.depth == 0 || open_object != object {
            return Err(ScanError::UnexpectedByte {
                offset: at,
                found: byte,
                expected: if open_object { "`}`" } else { "`]`" },
            });
        }
        self.objects >>= 1;
        self.depth -= 1;
        Ok(self.depth == 0)
    }
}
