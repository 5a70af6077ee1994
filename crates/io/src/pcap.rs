//! Classic pcap files (the libpcap format): a streaming reader and writer.
//!
//! The reader takes both byte orders and both timestamp resolutions
//! (microsecond magic `a1b2c3d4`, nanosecond magic `a1b23c4d`); the writer
//! writes the host's byte order with either resolution. Timestamps are
//! nanoseconds since the Unix epoch. Only Ethernet (LINKTYPE_ETHERNET, 1) is
//! accepted by [`Reader::new`], since that is what the pipeline takes.
//!
//! [`open`] also reads pcapng (section header, interface description,
//! enhanced / simple / obsolete packet blocks, any byte order, any
//! `if_tsresol`), the default format of Wireshark and dumpcap.
//!
//! A truncated or garbled file gives a typed [`PcapError`], never a panic; a
//! record whose declared length is absurd is refused before any buffer is
//! sized from it.

use std::io::{self, Read, Write};

/// LINKTYPE_ETHERNET: frames start with the Ethernet header.
pub const LINKTYPE_ETHERNET: u32 = 1;

const MAGIC_MICROS: u32 = 0xa1b2_c3d4;
const MAGIC_NANOS: u32 = 0xa1b2_3c4d;
const FILE_HEADER_LEN: usize = 24;
const RECORD_HEADER_LEN: usize = 16;

/// Largest captured length accepted for one record (256 KiB, as libpcap's
/// MAXIMUM_SNAPLEN).
pub const MAX_RECORD_LEN: u32 = 262_144;

/// Why a pcap file could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum PcapError {
    /// The underlying reader or writer failed.
    #[error("pcap I/O: {0}")]
    Io(#[from] io::Error),
    /// The file ended inside the 24-byte file header.
    #[error("truncated pcap file header ({0} of 24 bytes)")]
    TruncatedFileHeader(usize),
    /// The first four bytes are no pcap magic number.
    #[error("not a pcap file (magic {0:#010x})")]
    BadMagic(u32),
    /// The file's version is not 2.x.
    #[error("unsupported pcap version {major}.{minor}")]
    UnsupportedVersion {
        /// Major version.
        major: u16,
        /// Minor version.
        minor: u16,
    },
    /// A link type other than Ethernet.
    #[error("unsupported link type {0} (only Ethernet, 1, is supported)")]
    UnsupportedLinkType(u32),
    /// The file ended inside a record header.
    #[error("record {index}: truncated record header ({got} of 16 bytes)")]
    TruncatedRecordHeader {
        /// 0-based record number.
        index: u64,
        /// Bytes present.
        got: usize,
    },
    /// The file ended inside a record's data.
    #[error("record {index}: truncated packet data ({got} of {expected} bytes)")]
    TruncatedRecord {
        /// 0-based record number.
        index: u64,
        /// Bytes present.
        got: usize,
        /// Bytes declared.
        expected: u32,
    },
    /// A record whose declared lengths cannot be right.
    #[error("record {index}: bad lengths (captured {caplen}, original {origlen}, limit {limit})")]
    BadRecordLength {
        /// 0-based record number.
        index: u64,
        /// Declared captured length.
        caplen: u32,
        /// Declared original length.
        origlen: u32,
        /// Largest allowed captured length.
        limit: u32,
    },
    /// A microsecond field of one million or more, or nanoseconds of a billion or more.
    #[error("record {index}: sub-second timestamp field {value} out of range")]
    BadTimestamp {
        /// 0-based record number.
        index: u64,
        /// The field.
        value: u32,
    },
    /// A packet too long to be written as one record.
    #[error("packet of {0} bytes is too long for a pcap record")]
    PacketTooLong(usize),
    /// The file ended inside a pcapng block.
    #[error("pcapng block {index}: truncated ({got} of {expected} bytes)")]
    TruncatedBlock {
        /// 0-based block number.
        index: u64,
        /// Bytes present.
        got: usize,
        /// Bytes declared (or needed).
        expected: usize,
    },
    /// A pcapng block that does not follow the format.
    #[error("pcapng block {index}: {reason}")]
    BadBlock {
        /// 0-based block number.
        index: u64,
        /// What is wrong.
        reason: &'static str,
    },
}

/// Timestamp resolution of a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resolution {
    /// Microseconds (magic `a1b2c3d4`, the common one).
    Micros,
    /// Nanoseconds (magic `a1b23c4d`).
    Nanos,
}

/// One record's header as read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record {
    /// Capture time, nanoseconds since the Unix epoch.
    pub ts_nanos: u64,
    /// Bytes captured (the length of the data returned).
    pub caplen: u32,
    /// Length of the packet on the wire.
    pub origlen: u32,
}

/// Reads any of `buf.len()` bytes it can; returns how many were read (less
/// than asked only at end of file).
fn read_full<R: Read>(r: &mut R, buf: &mut [u8]) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

/// The byte order of a capture file's fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ByteOrder {
    Little,
    Big,
}

impl ByteOrder {
    /// The 16-bit field at `b[at..]`.
    fn u16_at(self, b: &[u8], at: usize) -> u16 {
        let x = [b[at], b[at + 1]];
        match self {
            ByteOrder::Little => u16::from_le_bytes(x),
            ByteOrder::Big => u16::from_be_bytes(x),
        }
    }

    /// The 32-bit field at `b[at..]`.
    fn u32_at(self, b: &[u8], at: usize) -> u32 {
        let x = [b[at], b[at + 1], b[at + 2], b[at + 3]];
        match self {
            ByteOrder::Little => u32::from_le_bytes(x),
            ByteOrder::Big => u32::from_be_bytes(x),
        }
    }
}

/// A streaming reader of classic pcap files.
#[derive(Debug)]
pub struct Reader<R> {
    inner: R,
    order: ByteOrder,
    resolution: Resolution,
    snaplen: u32,
    linktype: u32,
    index: u64,
    failed: bool,
}

impl<R: Read> Reader<R> {
    /// Reads the file header; refuses link types other than Ethernet.
    pub fn new(inner: R) -> Result<Self, PcapError> {
        let r = Self::new_any_linktype(inner)?;
        if r.linktype != LINKTYPE_ETHERNET {
            return Err(PcapError::UnsupportedLinkType(r.linktype));
        }
        Ok(r)
    }

    /// Reads the file header, whatever the link type.
    pub fn new_any_linktype(mut inner: R) -> Result<Self, PcapError> {
        let mut first = [0u8; 4];
        let got = read_full(&mut inner, &mut first)?;
        if got < 4 {
            return Err(PcapError::TruncatedFileHeader(got));
        }
        Self::after_magic(inner, first)
    }

    /// Reads the rest of the file header once its first four bytes are known.
    fn after_magic(mut inner: R, first: [u8; 4]) -> Result<Self, PcapError> {
        let mut h = [0u8; FILE_HEADER_LEN];
        h[..4].copy_from_slice(&first);
        let got = 4 + read_full(&mut inner, &mut h[4..])?;
        let magic_le = u32::from_le_bytes(first);
        let magic_be = u32::from_be_bytes(first);
        let (order, resolution) = match (magic_le, magic_be) {
            (MAGIC_MICROS, _) => (ByteOrder::Little, Resolution::Micros),
            (MAGIC_NANOS, _) => (ByteOrder::Little, Resolution::Nanos),
            (_, MAGIC_MICROS) => (ByteOrder::Big, Resolution::Micros),
            (_, MAGIC_NANOS) => (ByteOrder::Big, Resolution::Nanos),
            _ => return Err(PcapError::BadMagic(magic_be)),
        };
        if got < FILE_HEADER_LEN {
            return Err(PcapError::TruncatedFileHeader(got));
        }
        let mut r = Reader {
            inner,
            order,
            resolution,
            snaplen: 0,
            linktype: 0,
            index: 0,
            failed: false,
        };
        let major = r.order.u16_at(&h, 4);
        let minor = r.order.u16_at(&h, 6);
        if major != 2 {
            return Err(PcapError::UnsupportedVersion { major, minor });
        }
        r.snaplen = r.order.u32_at(&h, 16);
        // The FCS-length bits (28..31) may be set in the link-type field.
        r.linktype = r.order.u32_at(&h, 20) & 0x0fff_ffff;
        Ok(r)
    }

    /// The file's timestamp resolution.
    pub fn resolution(&self) -> Resolution {
        self.resolution
    }

    /// The file's link type.
    pub fn linktype(&self) -> u32 {
        self.linktype
    }

    /// The file's snapshot length.
    pub fn snaplen(&self) -> u32 {
        self.snaplen
    }

    /// True when the file is big-endian.
    pub fn is_big_endian(&self) -> bool {
        self.order == ByteOrder::Big
    }

    /// Reads the next record into `buf` (replacing its contents). Returns
    /// `None` at a clean end of file. After an error, every later call
    /// returns `None`.
    pub fn next_into(&mut self, buf: &mut Vec<u8>) -> Result<Option<Record>, PcapError> {
        if self.failed {
            return Ok(None);
        }
        let res = self.next_inner(buf);
        if res.is_err() {
            self.failed = true;
        }
        res
    }

    fn next_inner(&mut self, buf: &mut Vec<u8>) -> Result<Option<Record>, PcapError> {
        let index = self.index;
        let mut h = [0u8; RECORD_HEADER_LEN];
        let got = read_full(&mut self.inner, &mut h)?;
        if got == 0 {
            return Ok(None);
        }
        if got < RECORD_HEADER_LEN {
            return Err(PcapError::TruncatedRecordHeader { index, got });
        }
        let secs = self.order.u32_at(&h, 0);
        let frac = self.order.u32_at(&h, 4);
        let caplen = self.order.u32_at(&h, 8);
        let origlen = self.order.u32_at(&h, 12);
        let limit = MAX_RECORD_LEN;
        if caplen > limit {
            return Err(PcapError::BadRecordLength {
                index,
                caplen,
                origlen,
                limit,
            });
        }
        let frac_nanos = match self.resolution {
            Resolution::Micros if frac < 1_000_000 => u64::from(frac) * 1_000,
            Resolution::Nanos if frac < 1_000_000_000 => u64::from(frac),
            _ => return Err(PcapError::BadTimestamp { index, value: frac }),
        };
        buf.clear();
        buf.resize(caplen as usize, 0);
        let got = read_full(&mut self.inner, buf)?;
        if got < caplen as usize {
            buf.truncate(got);
            return Err(PcapError::TruncatedRecord {
                index,
                got,
                expected: caplen,
            });
        }
        self.index += 1;
        Ok(Some(Record {
            ts_nanos: u64::from(secs) * 1_000_000_000 + frac_nanos,
            caplen,
            origlen,
        }))
    }

    /// Reads every remaining record: `(timestamp in ns, frame)`.
    pub fn read_all(&mut self) -> Result<Vec<(u64, Vec<u8>)>, PcapError> {
        let mut out = Vec::new();
        let mut buf = Vec::new();
        while let Some(rec) = self.next_into(&mut buf)? {
            out.push((rec.ts_nanos, buf.clone()));
        }
        Ok(out)
    }

    /// The underlying reader.
    pub fn into_inner(self) -> R {
        self.inner
    }
}

/// A streaming writer of classic pcap files (host byte order, Ethernet).
#[derive(Debug)]
pub struct Writer<W: Write> {
    inner: W,
    resolution: Resolution,
    count: u64,
}

impl<W: Write> Writer<W> {
    /// Writes a microsecond-resolution Ethernet file header.
    pub fn new(inner: W) -> Result<Self, PcapError> {
        Self::with_resolution(inner, Resolution::Micros)
    }

    /// Writes an Ethernet file header with the given resolution.
    pub fn with_resolution(mut inner: W, resolution: Resolution) -> Result<Self, PcapError> {
        let magic = match resolution {
            Resolution::Micros => MAGIC_MICROS,
            Resolution::Nanos => MAGIC_NANOS,
        };
        let mut h = [0u8; FILE_HEADER_LEN];
        h[0..4].copy_from_slice(&magic.to_ne_bytes());
        h[4..6].copy_from_slice(&2u16.to_ne_bytes());
        h[6..8].copy_from_slice(&4u16.to_ne_bytes());
        // thiszone and sigfigs stay zero.
        h[16..20].copy_from_slice(&MAX_RECORD_LEN.to_ne_bytes());
        h[20..24].copy_from_slice(&LINKTYPE_ETHERNET.to_ne_bytes());
        inner.write_all(&h)?;
        Ok(Writer {
            inner,
            resolution,
            count: 0,
        })
    }

    /// Appends one frame captured at `ts_nanos` (ns since the Unix epoch).
    pub fn write(&mut self, ts_nanos: u64, frame: &[u8]) -> Result<(), PcapError> {
        let len = u32::try_from(frame.len())
            .ok()
            .filter(|&l| l <= MAX_RECORD_LEN)
            .ok_or(PcapError::PacketTooLong(frame.len()))?;
        let secs = (ts_nanos / 1_000_000_000).min(u64::from(u32::MAX)) as u32;
        let nanos = (ts_nanos % 1_000_000_000) as u32;
        let frac = match self.resolution {
            Resolution::Micros => nanos / 1_000,
            Resolution::Nanos => nanos,
        };
        let mut h = [0u8; RECORD_HEADER_LEN];
        h[0..4].copy_from_slice(&secs.to_ne_bytes());
        h[4..8].copy_from_slice(&frac.to_ne_bytes());
        h[8..12].copy_from_slice(&len.to_ne_bytes());
        h[12..16].copy_from_slice(&len.to_ne_bytes());
        self.inner.write_all(&h)?;
        self.inner.write_all(frame)?;
        self.count += 1;
        Ok(())
    }

    /// Records written so far.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Flushes and returns the underlying writer.
    pub fn finish(mut self) -> Result<W, PcapError> {
        self.inner.flush()?;
        Ok(self.inner)
    }
}

/// A writer of pcapng files, as `fastfwd capture` writes them: one
/// section, an interface description per named interface (Ethernet,
/// nanosecond timestamps, `if_name`), and an enhanced packet block per
/// frame with its interface and an optional comment (`opt_comment`).
/// Little-endian, as tcpdump and Wireshark read on any host.
#[derive(Debug)]
pub struct NgWriter<W: Write> {
    inner: W,
    interfaces: u32,
    count: u64,
}

/// Appends option `code` with `value`, padded to four bytes.
fn ng_option(out: &mut Vec<u8>, code: u16, value: &[u8]) {
    out.extend_from_slice(&code.to_le_bytes());
    out.extend_from_slice(&(value.len() as u16).to_le_bytes());
    out.extend_from_slice(value);
    out.resize(out.len().next_multiple_of(4), 0);
}

/// Writes a block of `btype` around `body` (already padded).
fn ng_block<W: Write>(w: &mut W, btype: u32, body: &[u8]) -> io::Result<()> {
    let total = (12 + body.len()) as u32;
    w.write_all(&btype.to_le_bytes())?;
    w.write_all(&total.to_le_bytes())?;
    w.write_all(body)?;
    w.write_all(&total.to_le_bytes())
}

impl<W: Write> NgWriter<W> {
    /// Writes the section header and one interface description per name.
    pub fn new(mut inner: W, interfaces: &[&str]) -> Result<Self, PcapError> {
        let mut shb = Vec::new();
        shb.extend_from_slice(&PCAPNG_BOM.to_le_bytes());
        shb.extend_from_slice(&1u16.to_le_bytes());
        shb.extend_from_slice(&0u16.to_le_bytes());
        shb.extend_from_slice(&(-1i64).to_le_bytes());
        ng_option(&mut shb, 4, b"fastfwd"); // shb_userappl
        ng_option(&mut shb, 0, &[]);
        ng_block(&mut inner, PCAPNG_SHB, &shb)?;
        for name in interfaces {
            let mut idb = Vec::new();
            idb.extend_from_slice(&(LINKTYPE_ETHERNET as u16).to_le_bytes());
            idb.extend_from_slice(&0u16.to_le_bytes());
            idb.extend_from_slice(&0u32.to_le_bytes()); // no snaplen
            ng_option(&mut idb, 2, name.as_bytes()); // if_name
            ng_option(&mut idb, 9, &[9]); // if_tsresol: nanoseconds
            ng_option(&mut idb, 0, &[]);
            ng_block(&mut inner, 1, &idb)?;
        }
        Ok(NgWriter {
            inner,
            interfaces: interfaces.len() as u32,
            count: 0,
        })
    }

    /// Writes one frame seen on interface `interface` (its index in the
    /// names given to [`NgWriter::new`]) at `ts_nanos`, with `comment`.
    pub fn write(
        &mut self,
        interface: u32,
        ts_nanos: u64,
        frame: &[u8],
        comment: Option<&str>,
    ) -> Result<(), PcapError> {
        if interface >= self.interfaces {
            return Err(PcapError::Io(io::Error::other(format!(
                "interface {interface} of {}",
                self.interfaces
            ))));
        }
        let mut epb = Vec::with_capacity(32 + frame.len());
        epb.extend_from_slice(&interface.to_le_bytes());
        epb.extend_from_slice(&((ts_nanos >> 32) as u32).to_le_bytes());
        epb.extend_from_slice(&(ts_nanos as u32).to_le_bytes());
        epb.extend_from_slice(&(frame.len() as u32).to_le_bytes());
        epb.extend_from_slice(&(frame.len() as u32).to_le_bytes());
        epb.extend_from_slice(frame);
        epb.resize(epb.len().next_multiple_of(4), 0);
        if let Some(c) = comment {
            ng_option(&mut epb, 1, c.as_bytes()); // opt_comment
            ng_option(&mut epb, 0, &[]);
        }
        ng_block(&mut self.inner, 6, &epb)?;
        self.count += 1;
        Ok(())
    }

    /// Frames written so far.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Flushes and returns the inner writer.
    pub fn finish(mut self) -> Result<W, PcapError> {
        self.inner.flush()?;
        Ok(self.inner)
    }
}

const PCAPNG_SHB: u32 = 0x0a0d_0d0a;
const PCAPNG_BOM: u32 = 0x1a2b_3c4d;
/// Largest pcapng block accepted: a maximal record plus room for options.
const MAX_BLOCK_LEN: usize = MAX_RECORD_LEN as usize + 65_536;

/// An interface of a pcapng section.
#[derive(Debug, Clone, Copy)]
struct NgInterface {
    linktype: u16,
    snaplen: u32,
    /// `if_tsresol`: bit 7 clear: 10^-n seconds; set: 2^-n seconds.
    tsresol: u8,
}

impl NgInterface {
    fn nanos_of(&self, ts: u64) -> u64 {
        let n = u32::from(self.tsresol & 0x7f);
        if self.tsresol & 0x80 == 0 {
            if n <= 9 {
                ts.saturating_mul(10u64.pow(9 - n))
            } else {
                ts / 10u64.checked_pow(n - 9).unwrap_or(u64::MAX)
            }
        } else {
            let scaled = u128::from(ts) * 1_000_000_000;
            u64::try_from(scaled.checked_shr(n).unwrap_or(0)).unwrap_or(u64::MAX)
        }
    }
}

/// A streaming reader of pcapng files (Ethernet interfaces only).
#[derive(Debug)]
pub struct NgReader<R> {
    inner: R,
    order: ByteOrder,
    interfaces: Vec<NgInterface>,
    /// Bytes of a block's first 4 bytes already consumed (only at start).
    pending_type: Option<u32>,
    index: u64,
    failed: bool,
    block: Vec<u8>,
}

impl<R: Read> NgReader<R> {
    /// Starts reading a pcapng file whose first four bytes (the section
    /// header block type) were already read.
    fn after_magic(inner: R) -> Self {
        NgReader {
            inner,
            order: ByteOrder::Little,
            interfaces: Vec::new(),
            pending_type: Some(PCAPNG_SHB),
            index: 0,
            failed: false,
            block: Vec::new(),
        }
    }

    fn bad(&self, reason: &'static str) -> PcapError {
        PcapError::BadBlock {
            index: self.index,
            reason,
        }
    }

    /// Reads the next block into `self.block` (body only); returns its type,
    /// or `None` at a clean end of file.
    fn next_block(&mut self) -> Result<Option<u32>, PcapError> {
        let index = self.index;
        let mut head = [0u8; 8];
        let (btype_raw, got) = match self.pending_type.take() {
            Some(t) => {
                head[..4].copy_from_slice(&t.to_le_bytes());
                (Some(t), 4 + read_full(&mut self.inner, &mut head[4..])?)
            }
            None => (None, read_full(&mut self.inner, &mut head)?),
        };
        if got == 0 {
            return Ok(None);
        }
        if got < 8 {
            return Err(PcapError::TruncatedBlock {
                index,
                got,
                expected: 8,
            });
        }
        let raw_type =
            btype_raw.unwrap_or_else(|| u32::from_le_bytes([head[0], head[1], head[2], head[3]]));
        if raw_type == PCAPNG_SHB {
            // The byte order of this section is in its byte-order magic.
            let mut bom = [0u8; 4];
            let n = read_full(&mut self.inner, &mut bom)?;
            if n < 4 {
                return Err(PcapError::TruncatedBlock {
                    index,
                    got: 8 + n,
                    expected: 12,
                });
            }
            self.order = match (u32::from_le_bytes(bom), u32::from_be_bytes(bom)) {
                (PCAPNG_BOM, _) => ByteOrder::Little,
                (_, PCAPNG_BOM) => ByteOrder::Big,
                _ => return Err(self.bad("section header without byte-order magic")),
            };
            let total = self.order.u32_at(&head, 4) as usize;
            if total < 28 || total & 3 != 0 || total > MAX_BLOCK_LEN {
                return Err(self.bad("section header length out of range"));
            }
            self.block.clear();
            self.block.extend_from_slice(&bom);
            self.read_rest(total, 12)?;
            self.interfaces.clear();
            self.index += 1;
            return Ok(Some(PCAPNG_SHB));
        }
        let btype = self.order.u32_at(&head, 0);
        let total = self.order.u32_at(&head, 4) as usize;
        if total < 12 || total & 3 != 0 || total > MAX_BLOCK_LEN {
            return Err(self.bad("block length out of range"));
        }
        self.block.clear();
        self.read_rest(total, 8)?;
        self.index += 1;
        Ok(Some(btype))
    }

    /// Reads the rest of a block of `total` bytes of which `done` were read,
    /// leaving the body (without the trailing length) in `self.block`.
    fn read_rest(&mut self, total: usize, done: usize) -> Result<(), PcapError> {
        let have = self.block.len();
        let need = total - done;
        self.block.resize(have + need, 0);
        let got = read_full(&mut self.inner, &mut self.block[have..])?;
        if got < need {
            return Err(PcapError::TruncatedBlock {
                index: self.index,
                got: done + got,
                expected: total,
            });
        }
        let body_len = self.block.len() - 4;
        let trailer = self.order.u32_at(&self.block, body_len) as usize;
        if trailer != total {
            return Err(self.bad("trailing block length differs from the leading one"));
        }
        self.block.truncate(body_len);
        Ok(())
    }

    fn interface(&self, id: usize) -> Result<NgInterface, PcapError> {
        let i = *self
            .interfaces
            .get(id)
            .ok_or_else(|| self.bad("packet of an undeclared interface"))?;
        if u32::from(i.linktype) != LINKTYPE_ETHERNET {
            return Err(PcapError::UnsupportedLinkType(u32::from(i.linktype)));
        }
        Ok(i)
    }

    /// Reads the next packet into `buf`. `None` at a clean end of file;
    /// after an error, every later call returns `None`.
    pub fn next_into(&mut self, buf: &mut Vec<u8>) -> Result<Option<Record>, PcapError> {
        if self.failed {
            return Ok(None);
        }
        let res = self.next_inner(buf);
        if res.is_err() {
            self.failed = true;
        }
        res
    }

    fn next_inner(&mut self, buf: &mut Vec<u8>) -> Result<Option<Record>, PcapError> {
        loop {
            let Some(btype) = self.next_block()? else {
                return Ok(None);
            };
            let b = &self.block;
            match btype {
                PCAPNG_SHB => {
                    if b.len() < 16 {
                        return Err(self.bad("section header too short"));
                    }
                    if self.order.u16_at(b, 4) != 1 {
                        return Err(self.bad("unsupported pcapng major version"));
                    }
                }
                // Interface description.
                1 => {
                    if b.len() < 8 {
                        return Err(self.bad("interface description too short"));
                    }
                    let mut iface = NgInterface {
                        linktype: self.order.u16_at(b, 0),
                        snaplen: self.order.u32_at(b, 4),
                        tsresol: 6,
                    };
                    let mut at = 8;
                    while at + 4 <= b.len() {
                        let code = self.order.u16_at(b, at);
                        let len = usize::from(self.order.u16_at(b, at + 2));
                        if code == 0 {
                            break;
                        }
                        if at + 4 + len > b.len() {
                            return Err(self.bad("interface option past the block"));
                        }
                        if code == 9 && len >= 1 {
                            iface.tsresol = b[at + 4];
                        }
                        at += 4 + len.div_ceil(4) * 4;
                    }
                    self.interfaces.push(iface);
                }
                // Enhanced packet (6) and the obsolete packet block (2).
                6 | 2 => {
                    if b.len() < 20 {
                        return Err(self.bad("packet block too short"));
                    }
                    let id = if btype == 6 {
                        self.order.u32_at(b, 0) as usize
                    } else {
                        usize::from(self.order.u16_at(b, 0))
                    };
                    let ts = (u64::from(self.order.u32_at(b, 4)) << 32)
                        | u64::from(self.order.u32_at(b, 8));
                    let caplen = self.order.u32_at(b, 12);
                    let origlen = self.order.u32_at(b, 16);
                    if caplen > MAX_RECORD_LEN || 20 + caplen as usize > b.len() {
                        return Err(self.bad("captured length past the block"));
                    }
                    let iface = self.interface(id)?;
                    buf.clear();
                    buf.extend_from_slice(&self.block[20..20 + caplen as usize]);
                    return Ok(Some(Record {
                        ts_nanos: iface.nanos_of(ts),
                        caplen,
                        origlen,
                    }));
                }
                // Simple packet: no timestamp, interface 0.
                3 => {
                    if b.len() < 4 {
                        return Err(self.bad("simple packet block too short"));
                    }
                    let origlen = self.order.u32_at(b, 0);
                    let iface = self.interface(0)?;
                    let mut caplen = (b.len() - 4).min(origlen as usize);
                    if iface.snaplen != 0 {
                        caplen = caplen.min(iface.snaplen as usize);
                    }
                    buf.clear();
                    buf.extend_from_slice(&self.block[4..4 + caplen]);
                    return Ok(Some(Record {
                        ts_nanos: 0,
                        caplen: caplen as u32,
                        origlen,
                    }));
                }
                // Name resolution, statistics, custom blocks...: skipped.
                _ => {}
            }
        }
    }
}

/// A reader of either format, chosen by the file's first bytes.
#[derive(Debug)]
pub enum AnyReader<R> {
    /// Classic pcap.
    Classic(Reader<R>),
    /// pcapng.
    Ng(NgReader<R>),
}

impl<R: Read> AnyReader<R> {
    /// Reads the next packet into `buf`; `None` at the end of the file.
    pub fn next_into(&mut self, buf: &mut Vec<u8>) -> Result<Option<Record>, PcapError> {
        match self {
            AnyReader::Classic(r) => r.next_into(buf),
            AnyReader::Ng(r) => r.next_into(buf),
        }
    }

    /// Reads every remaining packet: `(timestamp in ns, frame)`.
    pub fn read_all(&mut self) -> Result<Vec<(u64, Vec<u8>)>, PcapError> {
        let mut out = Vec::new();
        let mut buf = Vec::new();
        while let Some(rec) = self.next_into(&mut buf)? {
            out.push((rec.ts_nanos, buf.clone()));
        }
        Ok(out)
    }
}

/// Opens a classic pcap (Ethernet) or pcapng file.
pub fn open<R: Read>(mut inner: R) -> Result<AnyReader<R>, PcapError> {
    let mut first = [0u8; 4];
    let got = read_full(&mut inner, &mut first)?;
    if got < 4 {
        return Err(PcapError::TruncatedFileHeader(got));
    }
    if u32::from_le_bytes(first) == PCAPNG_SHB {
        return Ok(AnyReader::Ng(NgReader::after_magic(inner)));
    }
    let r = Reader::after_magic(inner, first)?;
    if r.linktype != LINKTYPE_ETHERNET {
        return Err(PcapError::UnsupportedLinkType(r.linktype));
    }
    Ok(AnyReader::Classic(r))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames() -> Vec<(u64, Vec<u8>)> {
        vec![
            (1_700_000_000_123_456_000, vec![0xaa; 60]),
            (1_700_000_000_123_457_000, (0..=255u8).collect()),
            (1_700_000_001_000_000_000, vec![]),
        ]
    }

    fn written(res: Resolution) -> Vec<u8> {
        let mut w = Writer::with_resolution(Vec::new(), res).unwrap();
        for (t, f) in frames() {
            w.write(t, &f).unwrap();
        }
        assert_eq!(w.count(), 3);
        w.finish().unwrap()
    }

    #[test]
    fn pcapng_written_reads_back() {
        let mut w = NgWriter::new(Vec::new(), &["d0", "d1"]).unwrap();
        for (i, (t, f)) in frames().iter().enumerate() {
            let comment = (i == 1).then_some("drop: no_route");
            w.write(i as u32 % 2, *t, f, comment).unwrap();
        }
        assert!(w.write(2, 0, &[1], None).is_err(), "no third interface");
        let file = w.finish().unwrap();
        let back = open(&file[..]).unwrap().read_all().unwrap();
        assert_eq!(back, frames());
    }

    /// Re-encodes a host-order file in the other byte order.
    fn byte_swapped(file: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        let sw4 = |b: &[u8]| [b[3], b[2], b[1], b[0]];
        out.extend(sw4(&file[0..4]));
        out.extend([file[5], file[4], file[7], file[6]]);
        for at in (8..24).step_by(4) {
            out.extend(sw4(&file[at..at + 4]));
        }
        let mut at = 24;
        while at < file.len() {
            let caplen = u32::from_ne_bytes(file[at + 8..at + 12].try_into().unwrap()) as usize;
            for f in (at..at + 16).step_by(4) {
                out.extend(sw4(&file[f..f + 4]));
            }
            out.extend(&file[at + 16..at + 16 + caplen]);
            at += 16 + caplen;
        }
        out
    }

    #[test]
    fn round_trip_both_resolutions_and_byte_orders() {
        for res in [Resolution::Micros, Resolution::Nanos] {
            let file = written(res);
            for bytes in [file.clone(), byte_swapped(&file)] {
                let mut r = Reader::new(&bytes[..]).unwrap();
                assert_eq!(r.resolution(), res);
                assert_eq!(r.linktype(), LINKTYPE_ETHERNET);
                assert_eq!(r.read_all().unwrap(), frames());
            }
            let swapped = byte_swapped(&file);
            let mut r = Reader::new(&swapped[..]).unwrap();
            assert_ne!(r.is_big_endian(), cfg!(target_endian = "big"));
            assert_eq!(r.read_all().unwrap().len(), 3);
        }
    }

    #[test]
    fn micro_resolution_truncates_nanoseconds() {
        let mut w = Writer::new(Vec::new()).unwrap();
        w.write(5_000_000_999, &[1, 2, 3]).unwrap();
        let bytes = w.finish().unwrap();
        let got = Reader::new(&bytes[..]).unwrap().read_all().unwrap();
        assert_eq!(got, vec![(5_000_000_000, vec![1, 2, 3])]);
    }

    #[test]
    fn reads_a_known_big_endian_file() {
        // Written by hand: big-endian, microseconds, Ethernet, one 4-byte record.
        let bytes: Vec<u8> = [
            &[0xa1, 0xb2, 0xc3, 0xd4, 0, 2, 0, 4][..],
            &[0; 8],
            &[0, 0, 0xff, 0xff, 0, 0, 0, 1],
            &[0, 0, 0, 10, 0, 0, 0, 7, 0, 0, 0, 4, 0, 0, 0, 60],
            &[9, 8, 7, 6],
        ]
        .concat();
        let mut r = Reader::new(&bytes[..]).unwrap();
        assert_eq!(r.snaplen(), 65535);
        let mut buf = Vec::new();
        let rec = r.next_into(&mut buf).unwrap().unwrap();
        assert_eq!(rec.ts_nanos, 10_000_007_000);
        assert_eq!((rec.caplen, rec.origlen), (4, 60));
        assert_eq!(buf, [9, 8, 7, 6]);
        assert!(r.next_into(&mut buf).unwrap().is_none());
    }

    #[test]
    fn every_truncation_is_a_typed_error() {
        let file = written(Resolution::Micros);
        for cut in 0..file.len() {
            let bytes = &file[..cut];
            let result = Reader::new(bytes).and_then(|mut r| r.read_all());
            let boundaries = [24, 24 + 16 + 60, 24 + 16 + 60 + 16 + 256];
            if boundaries.contains(&cut) {
                assert!(result.is_ok(), "cut {cut}: {result:?}");
                continue;
            }
            match result {
                Err(PcapError::TruncatedFileHeader(n)) => assert!(cut < 24 && n == cut),
                Err(PcapError::TruncatedRecordHeader { .. })
                | Err(PcapError::TruncatedRecord { .. }) => {
                    assert!(cut > 24)
                }
                other => panic!("cut {cut}: {other:?}"),
            }
        }
    }

    #[test]
    fn garbled_headers_are_typed_errors() {
        let file = written(Resolution::Micros);
        let mut bad = file.clone();
        bad[0] = 0;
        assert!(matches!(Reader::new(&bad[..]), Err(PcapError::BadMagic(_))));
        let mut bad = file.clone();
        bad[4..6].copy_from_slice(&3u16.to_ne_bytes());
        assert!(matches!(
            Reader::new(&bad[..]),
            Err(PcapError::UnsupportedVersion { major: 3, .. })
        ));
        let mut bad = file.clone();
        bad[20..24].copy_from_slice(&101u32.to_ne_bytes());
        assert!(matches!(
            Reader::new(&bad[..]),
            Err(PcapError::UnsupportedLinkType(101))
        ));
        assert_eq!(Reader::new_any_linktype(&bad[..]).unwrap().linktype(), 101);
        // A caplen of 4 GiB is refused before any buffer is sized from it.
        let mut bad = file.clone();
        bad[24 + 8..24 + 12].copy_from_slice(&u32::MAX.to_ne_bytes());
        let e = Reader::new(&bad[..]).unwrap().read_all().unwrap_err();
        assert!(
            matches!(e, PcapError::BadRecordLength { index: 0, .. }),
            "{e}"
        );
        // Microseconds of a million or more.
        let mut bad = file.clone();
        bad[24 + 4..24 + 8].copy_from_slice(&1_000_000u32.to_ne_bytes());
        let e = Reader::new(&bad[..]).unwrap().read_all().unwrap_err();
        assert!(matches!(e, PcapError::BadTimestamp { index: 0, .. }), "{e}");
        // After an error the reader stays finished.
        let mut r = Reader::new(&bad[..]).unwrap();
        let mut buf = Vec::new();
        assert!(r.next_into(&mut buf).is_err());
        assert!(r.next_into(&mut buf).unwrap().is_none());
    }

    #[test]
    fn arbitrary_bytes_never_panic() {
        // A small deterministic sweep of garbage after a valid header.
        let header = &written(Resolution::Nanos)[..24];
        let mut x: u32 = 0x1234_5678;
        for len in 0..300 {
            let mut bytes = header.to_vec();
            for _ in 0..len {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                bytes.push(x as u8);
            }
            if let Ok(mut r) = Reader::new(&bytes[..]) {
                let _ = r.read_all();
            }
        }
    }

    #[test]
    fn refuses_oversized_writes() {
        let mut w = Writer::new(Vec::new()).unwrap();
        let big = vec![0u8; MAX_RECORD_LEN as usize + 1];
        assert!(matches!(w.write(0, &big), Err(PcapError::PacketTooLong(_))));
    }

    /// A pcapng file built by hand: SHB, IDB (Ethernet, given tsresol),
    /// a name-resolution block to skip, then one EPB per frame and one SPB.
    fn pcapng(big: bool, tsresol: Option<u8>, frames: &[(u64, Vec<u8>)]) -> Vec<u8> {
        let w32 = |v: u32| {
            if big {
                v.to_be_bytes()
            } else {
                v.to_le_bytes()
            }
        };
        let w16 = |v: u16| {
            if big {
                v.to_be_bytes()
            } else {
                v.to_le_bytes()
            }
        };
        let block = |t: u32, body: &[u8]| {
            let total = (12 + body.len().div_ceil(4) * 4) as u32;
            let mut b = Vec::new();
            b.extend(w32(t));
            b.extend(w32(total));
            b.extend_from_slice(body);
            b.resize(total as usize - 4, 0);
            b.extend(w32(total));
            b
        };
        let mut out = Vec::new();
        let mut shb = Vec::new();
        shb.extend(w32(PCAPNG_BOM));
        shb.extend(w16(1));
        shb.extend(w16(0));
        shb.extend([0xff; 8]);
        out.extend(block(PCAPNG_SHB, &shb));
        let mut idb = Vec::new();
        idb.extend(w16(1));
        idb.extend(w16(0));
        idb.extend(w32(0));
        if let Some(r) = tsresol {
            idb.extend(w16(9));
            idb.extend(w16(1));
            idb.extend([r, 0, 0, 0]);
            idb.extend(w16(0));
            idb.extend(w16(0));
        }
        out.extend(block(1, &idb));
        out.extend(block(4, &[0, 0, 0, 0]));
        let units = |ns: u64| match tsresol {
            None => ns / 1_000,
            Some(9) => ns,
            Some(0x9e) => ((u128::from(ns) << 30) / 1_000_000_000) as u64,
            Some(r) => panic!("test resolution {r}"),
        };
        for (ts, f) in frames {
            let t = units(*ts);
            let mut epb = Vec::new();
            epb.extend(w32(0));
            epb.extend(w32((t >> 32) as u32));
            epb.extend(w32(t as u32));
            epb.extend(w32(f.len() as u32));
            epb.extend(w32(f.len() as u32));
            epb.extend_from_slice(f);
            out.extend(block(6, &epb));
        }
        let mut spb = Vec::new();
        spb.extend(w32(3));
        spb.extend([7, 8, 9]);
        out.extend(block(3, &spb));
        out
    }

    #[test]
    fn pcapng_both_byte_orders_and_resolutions() {
        let frames = vec![
            (1_700_000_000_123_456_000u64, vec![1u8; 61]),
            (1_700_000_001_000_000_000, vec![2u8; 64]),
        ];
        for big in [false, true] {
            // 0x9e: bit 7 set, 2^-30 s units.
            for res in [None, Some(9), Some(0x9e)] {
                let bytes = pcapng(big, res, &frames);
                let mut r = open(&bytes[..]).unwrap();
                assert!(matches!(r, AnyReader::Ng(_)));
                let got = r.read_all().unwrap();
                assert_eq!(got.len(), 3, "big {big} res {res:?}");
                for (g, w) in got.iter().zip(&frames) {
                    assert_eq!(g.1, w.1);
                    // 2^-30 s units lose under a nanosecond.
                    assert!(g.0.abs_diff(w.0) <= 1, "{} vs {}", g.0, w.0);
                }
                assert_eq!(got[2], (0, vec![7, 8, 9]));
            }
        }
    }

    #[test]
    fn open_reads_classic_files_too() {
        let bytes = written(Resolution::Nanos);
        let mut r = open(&bytes[..]).unwrap();
        assert!(matches!(r, AnyReader::Classic(_)));
        assert_eq!(r.read_all().unwrap(), frames());
    }

    #[test]
    fn pcapng_truncation_and_garbage_are_typed_errors() {
        let bytes = pcapng(false, None, &[(5_000, vec![3u8; 60])]);
        // Block ends: after SHB (28), IDB (+20), name resolution (+16), EPB (+92).
        let ends = [28, 48, 64, 156];
        for cut in 0..bytes.len() {
            match open(&bytes[..cut]).and_then(|mut r| r.read_all()) {
                Ok(v) if ends.contains(&cut) => {
                    assert_eq!(v.len(), usize::from(cut == 156), "cut {cut}")
                }
                Ok(v) => panic!("cut {cut}: read {} packets from a truncated file", v.len()),
                Err(
                    PcapError::TruncatedFileHeader(_)
                    | PcapError::TruncatedBlock { .. }
                    | PcapError::BadBlock { .. },
                ) => {}
                Err(e) => panic!("cut {cut}: {e}"),
            }
        }
        // A packet of an undeclared interface.
        let mut bad = bytes.clone();
        let epb = bytes.len() - 16 - 20 - 60 - 16;
        assert_eq!(&bad[epb..epb + 4], &6u32.to_le_bytes());
        bad[epb + 8] = 3;
        let e = open(&bad[..]).unwrap().read_all().unwrap_err();
        assert!(matches!(e, PcapError::BadBlock { .. }), "{e}");
        // Mismatched trailing length.
        let mut bad = bytes.clone();
        let n = bad.len();
        bad[n - 1] = 0x55;
        assert!(open(&bad[..]).unwrap().read_all().is_err());
        // Pseudo-random garbage after the section header never panics.
        let mut x: u32 = 0x9e37_79b9;
        for len in 0..400 {
            let mut b = bytes[..28].to_vec();
            for _ in 0..len {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                b.push(x as u8);
            }
            let _ = open(&b[..]).and_then(|mut r| r.read_all());
        }
    }
}
