//! storebench's native timed op loop (``client: native``).
//!
//! A store adapter prepares, before the clock, one client's requests: the
//! connection, PostgreSQL statements parsed once and their Bind messages
//! encoded (or Redis commands encoded as RESP), one request body per
//! operation. The driver then calls ``closed`` or ``open``, which run the
//! same loops as ``storebench/driver/loops.py`` with the GIL released: per
//! operation, write its body, read its replies (only as far as needed: ids
//! of a query's rows, errors), and write the latency in ns into the driver's
//! int64 buffer, reading CLOCK_MONOTONIC as the driver does. The driver's
//! stop flag (a byte) is read and its progress slot (an int64) written
//! through shared memory, by address. ``stop_on_signal`` (signals.rs) has
//! SIGINT and SIGTERM set that stop flag from the signal handler itself.
//! ``closed_calls`` (calls.rs) is the driver's closed loop for any Python
//! op: the same bookkeeping in Rust, the op called with the GIL held.

mod calls;
mod signals;

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicI64, AtomicU8, Ordering};
use std::time::Duration;

use bytes::BytesMut;
use fallible_iterator::FallibleIterator;
use postgres_protocol::authentication::{md5_hash, sasl};
use postgres_protocol::message::{backend, frontend};
use pyo3::exceptions::{PyConnectionError, PyValueError};
use pyo3::prelude::*;

pub(crate) fn now() -> i64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid timespec; CLOCK_MONOTONIC always exists on Linux
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec * 1_000_000_000 + ts.tv_nsec
}

/// Sleep to just before ``t``, then spin the last stretch (as loops.wait_until).
fn wait_until(t: i64) {
    loop {
        let left = t - now();
        if left <= 0 {
            return;
        }
        if left > 200_000 {
            std::thread::sleep(Duration::from_nanos((left - 150_000) as u64));
        }
    }
}

/// A socket with a read buffer: replies are parsed in place.
struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
    pos: usize,
    end: usize,
}

impl Conn {
    fn open(host: &str, port: u16) -> io::Result<Conn> {
        let stream = TcpStream::connect((host, port))?;
        stream.set_nodelay(true)?;
        Ok(Conn { stream, buf: vec![0; 1 << 16], pos: 0, end: 0 })
    }

    /// At least ``n`` unread bytes in the buffer.
    fn need(&mut self, n: usize) -> io::Result<()> {
        while self.end - self.pos < n {
            if self.pos > 0 {
                self.buf.copy_within(self.pos..self.end, 0);
                self.end -= self.pos;
                self.pos = 0;
            }
            if self.buf.len() < n {
                self.buf.resize(n.next_power_of_two(), 0);
            }
            let got = self.stream.read(&mut self.buf[self.end..])?;
            if got == 0 {
                return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "server closed the connection"));
            }
            self.end += got;
        }
        Ok(())
    }

    /// One line of a RESP reply (without CR LF), consumed.
    fn line(&mut self) -> io::Result<(usize, usize)> {
        let mut from = self.pos;
        loop {
            if let Some(k) = self.buf[from..self.end].windows(2).position(|w| w == b"\r\n") {
                let (s, e) = (self.pos, from + k);
                self.pos = e + 2;
                return Ok((s, e));
            }
            let seen = self.end - self.pos;
            self.need(seen + 1)?;
            from = self.pos + seen.saturating_sub(1);
        }
    }
}

fn bad(msg: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.into())
}

fn int_of(b: &[u8]) -> io::Result<i64> {
    std::str::from_utf8(b).ok().and_then(|s| s.parse().ok()).ok_or_else(|| bad("a malformed integer in a reply"))
}

/// What one operation's replies carry back: nothing, or the ids of its rows.
#[derive(Clone, Copy, PartialEq)]
enum Keep {
    Nothing,
    Ids,
}

enum Proto {
    /// PostgreSQL: one body ends with Sync; the replies end at ReadyForQuery.
    Pg,
    /// Redis: ``replies[j]`` replies to operation j's commands.
    Resp { replies: Vec<u32>, id_prefix: Vec<u8> },
}

/// One client's prepared operations on its own connection.
#[pyclass(module = "storebench_fastclient")]
struct NativeOps {
    conn: Conn,
    proto: Proto,
    body: Vec<u8>,
    offs: Vec<usize>,
    keep: Keep,
    ids: Vec<i64>,    // the ids each operation returned, one after another
    spans: Vec<i64>,  // slot j's ids: ids[spans[2j]..spans[2j+1]]; -1, -1: not done
}

/// What a loop returns: slots used, the loop's start, an error's text.
type Ran = (usize, i64, Option<String>);

struct Shared {
    lat: *mut i64,
    svc: *mut i64,
    n: usize,
    stop: *const AtomicU8,
    prog: *const AtomicI64,
}

// SAFETY: the driver keeps these buffers alive and owned by this client for the call
unsafe impl Send for Shared {}

impl NativeOps {
    fn op(&mut self, j: usize) -> io::Result<Option<String>> {
        let k = j % (self.offs.len() - 1);
        let (a, b) = (self.offs[k], self.offs[k + 1]);
        self.conn.stream.write_all(&self.body[a..b])?;
        match &self.proto {
            Proto::Pg => self.pg_replies(),
            Proto::Resp { replies, .. } => {
                let mut err = None;
                for _ in 0..replies[k] {
                    let e = self.resp_reply(0)?;
                    err = err.or(e);
                }
                Ok(err)
            }
        }
    }

    /// Reads to ReadyForQuery; the first error's message, if any.
    fn pg_replies(&mut self) -> io::Result<Option<String>> {
        let mut err = None;
        loop {
            self.conn.need(5)?;
            let p = self.conn.pos;
            let typ = self.conn.buf[p];
            let len = u32::from_be_bytes(self.conn.buf[p + 1..p + 5].try_into().unwrap()) as usize;
            self.conn.need(1 + len)?;
            let p = self.conn.pos;
            let body = &self.conn.buf[p + 5..p + 1 + len];
            match typ {
                b'E' if err.is_none() => err = Some(pg_error(body)),
                b'D' if self.keep == Keep::Ids => {
                    // one column, bigint in binary
                    if body.len() >= 14 && body[0..2] == [0, 1] && body[2..6] == [0, 0, 0, 8] {
                        self.ids.push(i64::from_be_bytes(body[6..14].try_into().unwrap()));
                    }
                }
                _ => {}
            }
            self.conn.pos = p + 1 + len;
            if typ == b'Z' {
                return Ok(err);
            }
        }
    }

    /// Reads one RESP reply; an error reply's text. At depth 1 of a search
    /// reply (FT.SEARCH: count, then key and fields per document) keys with
    /// the id prefix become ids.
    fn resp_reply(&mut self, depth: u32) -> io::Result<Option<String>> {
        let (s, e) = self.conn.line()?;
        let kind = self.conn.buf[s];
        match kind {
            b'+' | b':' => Ok(None),
            b'-' => Ok(Some(String::from_utf8_lossy(&self.conn.buf[s + 1..e]).into_owned())),
            b'$' => {
                let n = int_of(&self.conn.buf[s + 1..e])?;
                if n >= 0 {
                    let n = n as usize;
                    self.conn.need(n + 2)?;
                    let p = self.conn.pos;
                    if self.keep == Keep::Ids && depth == 1 {
                        if let Proto::Resp { id_prefix, .. } = &self.proto {
                            let v = &self.conn.buf[p..p + n];
                            if let Some(rest) = v.strip_prefix(id_prefix.as_slice()) {
                                self.ids.push(int_of(rest)?);
                            }
                        }
                    }
                    self.conn.pos = p + n + 2;
                }
                Ok(None)
            }
            b'*' => {
                let n = int_of(&self.conn.buf[s + 1..e])?;
                let mut err = None;
                for _ in 0..n.max(0) {
                    let x = self.resp_reply(depth + 1)?;
                    err = err.or(x);
                }
                Ok(err)
            }
            _ => Err(bad(format!("unexpected RESP reply type {:?}", kind as char))),
        }
    }

    fn record_ids(&mut self, j: usize, from: usize) {
        if self.keep == Keep::Ids {
            if self.spans.len() < 2 * (j + 1) {
                self.spans.resize(2 * (j + 1), -1);
            }
            self.spans[2 * j] = from as i64;
            self.spans[2 * j + 1] = self.ids.len() as i64;
        }
    }

    /// One operation at slot j: its end time, or the error that stops the loop.
    fn step(&mut self, j: usize) -> Result<i64, String> {
        let from = self.ids.len();
        match self.op(j) {
            Ok(None) => {
                let t = now();
                self.record_ids(j, from);
                Ok(t)
            }
            Ok(Some(e)) => Err(e),
            Err(e) => Err(format!("{}: {e}", io_kind(&e))),
        }
    }

    fn closed_loop(&mut self, sh: Shared, start: usize, deadline: i64) -> Ran {
        let mut t = now();
        let t_start = t;
        for j in start..sh.n {
            // SAFETY: see Shared; j < n, the buffers' lengths
            unsafe { (*sh.prog).store(j as i64, Ordering::Relaxed) };
            match self.step(j) {
                Ok(t1) => {
                    unsafe { *sh.lat.add(j) = t1 - t };
                    t = t1;
                    if t1 >= deadline || unsafe { (*sh.stop).load(Ordering::Relaxed) } != 0 {
                        return (j + 1, t_start, None);
                    }
                }
                Err(e) => {
                    unsafe { *sh.lat.add(j) = -1 };
                    return (j, t_start, Some(e));
                }
            }
        }
        (sh.n, t_start, None)
    }

    fn open_loop(&mut self, sh: Shared, start: usize, deadline: i64, origin: i64, interval: f64) -> Ran {
        let t_start = now();
        for j in start..sh.n {
            unsafe { (*sh.prog).store(j as i64, Ordering::Relaxed) };
            let due = origin + (j as f64 * interval) as i64;
            if now() < due {
                wait_until(due);
            }
            let t0 = now();
            match self.step(j) {
                Ok(t1) => {
                    unsafe {
                        *sh.lat.add(j) = t1 - due;
                        *sh.svc.add(j) = t1 - t0;
                    }
                    if t1 >= deadline || unsafe { (*sh.stop).load(Ordering::Relaxed) } != 0 {
                        return (j + 1, t_start, None);
                    }
                }
                Err(e) => {
                    unsafe { *sh.lat.add(j) = -1 };
                    return (j, t_start, Some(e));
                }
            }
        }
        (sh.n, t_start, None)
    }
}

fn io_kind(e: &io::Error) -> &'static str {
    match e.kind() {
        io::ErrorKind::UnexpectedEof | io::ErrorKind::ConnectionReset | io::ErrorKind::BrokenPipe => {
            "ConnectionError"
        }
        _ => "OSError",
    }
}

fn pg_error(body: &[u8]) -> String {
    // fields: a type byte, a C string; the message is 'M', the code 'C'
    let (mut code, mut msg) = (String::new(), String::new());
    let mut rest = body;
    while let Some((&t, r)) = rest.split_first() {
        if t == 0 {
            break;
        }
        let end = r.iter().position(|&b| b == 0).unwrap_or(r.len());
        let v = String::from_utf8_lossy(&r[..end]).into_owned();
        match t {
            b'C' => code = v,
            b'M' => msg = v,
            _ => {}
        }
        rest = &r[(end + 1).min(r.len())..];
    }
    format!("postgres error {code}: {msg}")
}

#[pymethods]
impl NativeOps {
    /// Back-to-back operations from slot ``start`` (as loops.closed):
    /// (slots used, the loop's start time, error). On an error the failed
    /// slot is marked -1 and ``used`` is its index.
    #[pyo3(signature = (start, lat, n, deadline, stop, prog))]
    fn closed(
        &mut self,
        py: Python<'_>,
        start: usize,
        lat: usize,
        n: usize,
        deadline: i64,
        stop: usize,
        prog: usize,
    ) -> Ran {
        let sh = Shared {
            lat: lat as *mut i64,
            svc: std::ptr::null_mut(),
            n,
            stop: stop as *const AtomicU8,
            prog: prog as *const AtomicI64,
        };
        py.allow_threads(move || self.closed_loop(sh, start, deadline))
    }

    /// Open loop (as loops.open_): op j due at origin + j*interval; latency
    /// from the due time into ``lat``, service time into ``svc``.
    #[pyo3(signature = (start, lat, svc, n, deadline, stop, prog, origin, interval))]
    #[allow(clippy::too_many_arguments)]
    fn open(
        &mut self,
        py: Python<'_>,
        start: usize,
        lat: usize,
        svc: usize,
        n: usize,
        deadline: i64,
        stop: usize,
        prog: usize,
        origin: i64,
        interval: f64,
    ) -> Ran {
        let sh = Shared {
            lat: lat as *mut i64,
            svc: svc as *mut i64,
            n,
            stop: stop as *const AtomicU8,
            prog: prog as *const AtomicI64,
        };
        py.allow_threads(move || self.open_loop(sh, start, deadline, origin, interval))
    }

    /// The ids the operations returned: (ids, spans), slot j's are
    /// ids[spans[2j]:spans[2j+1]]; -1, -1 where it failed or did not run.
    fn results(&self) -> (Vec<i64>, Vec<i64>) {
        (self.ids.clone(), self.spans.clone())
    }

    /// How many prepared operations there are (op j sends number j mod this).
    fn __len__(&self) -> usize {
        self.offs.len() - 1
    }
}

fn conn_error(what: &str, e: impl std::fmt::Display) -> PyErr {
    PyConnectionError::new_err(format!("{what}: {e}"))
}

/// Reads backend messages during start-up, until one the caller wants.
fn pg_message(conn: &mut Conn, rd: &mut BytesMut) -> io::Result<backend::Message> {
    loop {
        if let Some(m) = backend::Message::parse(rd)? {
            if let backend::Message::ErrorResponse(body) = m {
                let mut fields = body.fields();
                let mut msg = String::new();
                while let Ok(Some(f)) = fields.next() {
                    if f.type_() == b'M' {
                        msg = String::from_utf8_lossy(f.value_bytes()).into_owned();
                    }
                }
                return Err(bad(format!("postgres: {msg}")));
            }
            return Ok(m);
        }
        let mut tmp = [0u8; 8192];
        let got = conn.stream.read(&mut tmp)?;
        if got == 0 {
            return Err(bad("postgres closed the connection during start-up"));
        }
        rd.extend_from_slice(&tmp[..got]);
    }
}

fn pg_startup(conn: &mut Conn, user: &str, password: &str, database: &str) -> io::Result<()> {
    let mut out = BytesMut::new();
    frontend::startup_message(
        [("user", user), ("database", database), ("client_encoding", "UTF8")],
        &mut out,
    )?;
    conn.stream.write_all(&out)?;
    let mut rd = BytesMut::new();
    let mut scram: Option<sasl::ScramSha256> = None;
    loop {
        out.clear();
        match pg_message(conn, &mut rd)? {
            backend::Message::AuthenticationOk
            | backend::Message::ParameterStatus(_)
            | backend::Message::BackendKeyData(_)
            | backend::Message::NoticeResponse(_) => {}
            backend::Message::AuthenticationCleartextPassword => {
                frontend::password_message(password.as_bytes(), &mut out)?;
            }
            backend::Message::AuthenticationMd5Password(body) => {
                let h = md5_hash(user.as_bytes(), password.as_bytes(), body.salt());
                frontend::password_message(h.as_bytes(), &mut out)?;
            }
            backend::Message::AuthenticationSasl(_) => {
                let s = sasl::ScramSha256::new(password.as_bytes(), sasl::ChannelBinding::unsupported());
                frontend::sasl_initial_response(sasl::SCRAM_SHA_256, s.message(), &mut out)?;
                scram = Some(s);
            }
            backend::Message::AuthenticationSaslContinue(body) => {
                let s = scram.as_mut().ok_or_else(|| bad("SASL continue before start"))?;
                s.update(body.data())?;
                frontend::sasl_response(s.message(), &mut out)?;
            }
            backend::Message::AuthenticationSaslFinal(body) => {
                let s = scram.as_mut().ok_or_else(|| bad("SASL final before start"))?;
                s.finish(body.data())?;
            }
            backend::Message::ReadyForQuery(_) => break,
            _ => return Err(bad("unexpected message during start-up")),
        }
        if !out.is_empty() {
            conn.stream.write_all(&out)?;
        }
    }
    if !rd.is_empty() {
        return Err(bad("unexpected data after start-up"));
    }
    Ok(())
}

/// Sends ``out`` and reads to ReadyForQuery, failing on an error.
fn pg_roundtrip(ops: &mut NativeOps, out: &[u8]) -> PyResult<()> {
    ops.conn.stream.write_all(out).map_err(|e| conn_error("postgres", e))?;
    match ops.pg_replies() {
        Ok(None) => Ok(()),
        Ok(Some(e)) => Err(PyValueError::new_err(e)),
        Err(e) => Err(conn_error("postgres", e)),
    }
}

fn put_bind(stmt: &str, params: &[Option<Vec<u8>>], binary_result: bool, out: &mut BytesMut) -> PyResult<()> {
    let formats = [1i16]; // every parameter in binary
    frontend::bind(
        "",
        stmt,
        formats,
        params.iter(),
        |p, buf| match p {
            Some(v) => {
                buf.extend_from_slice(v);
                Ok(postgres_protocol::IsNull::No)
            }
            None => Ok(postgres_protocol::IsNull::Yes),
        },
        if binary_result { vec![1i16] } else { vec![] },
        out,
    )
    .map_err(|e| match e {
        frontend::BindError::Conversion(e) => PyValueError::new_err(e.to_string()),
        frontend::BindError::Serialization(e) => PyValueError::new_err(e.to_string()),
    })?;
    frontend::execute("", 0, out).map_err(|e| PyValueError::new_err(e.to_string()))
}

/// A client's prepared PostgreSQL operations: ``statements`` are parsed once
/// (named s0, s1, ..), after ``setup`` ran (simple queries, e.g. settings).
/// Operation j is ``ops[j]``: a list of (statement index, parameters in
/// binary, None for NULL), all bound and executed then one Sync, so they run
/// as one implicit transaction (a pipeline). ``ids``: keep the first bigint
/// column of each row returned (a query's ids, for recall).
#[pyfunction]
#[pyo3(signature = (host, port, user, password, database, setup, statements, ops, ids=false))]
#[allow(clippy::too_many_arguments)]
fn postgres(
    host: &str,
    port: u16,
    user: &str,
    password: &str,
    database: &str,
    setup: Vec<String>,
    statements: Vec<String>,
    ops: Vec<Vec<(usize, Vec<Option<Vec<u8>>>)>>,
    ids: bool,
) -> PyResult<NativeOps> {
    if ops.is_empty() {
        return Err(PyValueError::new_err("no operations to prepare"));
    }
    let mut conn = Conn::open(host, port).map_err(|e| conn_error("postgres", e))?;
    pg_startup(&mut conn, user, password, database).map_err(|e| conn_error("postgres start-up", e))?;
    let names: Vec<String> = (0..statements.len()).map(|k| format!("s{k}")).collect();
    let mut body = BytesMut::new();
    let mut offs = vec![0];
    for op in &ops {
        for (s, params) in op {
            let name = names.get(*s).ok_or_else(|| PyValueError::new_err("statement index out of range"))?;
            put_bind(name, params, ids, &mut body)?;
        }
        frontend::sync(&mut body);
        offs.push(body.len());
    }
    let keep = if ids { Keep::Ids } else { Keep::Nothing };
    let mut me = NativeOps { conn, proto: Proto::Pg, body: body.to_vec(), offs, keep: Keep::Nothing, ids: vec![], spans: vec![] };
    for q in &setup {
        let mut out = BytesMut::new();
        frontend::query(q, &mut out).map_err(|e| PyValueError::new_err(e.to_string()))?;
        pg_roundtrip(&mut me, &out)?;
    }
    let mut out = BytesMut::new();
    for (name, sql) in names.iter().zip(&statements) {
        frontend::parse(name, sql, std::iter::empty(), &mut out).map_err(|e| PyValueError::new_err(e.to_string()))?;
    }
    frontend::sync(&mut out);
    pg_roundtrip(&mut me, &out)?;
    me.keep = keep;
    Ok(me)
}

fn put_resp(cmd: &[Vec<u8>], out: &mut Vec<u8>) {
    out.extend_from_slice(format!("*{}\r\n", cmd.len()).as_bytes());
    for a in cmd {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
}

/// A client's prepared Redis operations: ``hello`` commands run first (AUTH,
/// SELECT: each must not fail), then operation j sends all of ``ops[j]``'s
/// commands at once (a pipeline, no MULTI) and reads their replies.
/// ``id_prefix``: keep the ids of keys with this prefix in a reply's
/// top-level array (FT.SEARCH's), for recall.
#[pyfunction]
#[pyo3(signature = (host, port, hello, ops, id_prefix=None))]
fn redis(
    host: &str,
    port: u16,
    hello: Vec<Vec<Vec<u8>>>,
    ops: Vec<Vec<Vec<Vec<u8>>>>,
    id_prefix: Option<Vec<u8>>,
) -> PyResult<NativeOps> {
    if ops.is_empty() {
        return Err(PyValueError::new_err("no operations to prepare"));
    }
    let conn = Conn::open(host, port).map_err(|e| conn_error("redis", e))?;
    let mut body = Vec::new();
    let mut offs = vec![0];
    let mut replies = Vec::with_capacity(ops.len());
    for op in &ops {
        for cmd in op {
            put_resp(cmd, &mut body);
        }
        offs.push(body.len());
        replies.push(op.len() as u32);
    }
    let keep = if id_prefix.is_some() { Keep::Ids } else { Keep::Nothing };
    let proto = Proto::Resp { replies, id_prefix: id_prefix.unwrap_or_default() };
    let mut me = NativeOps { conn, proto, body, offs, keep: Keep::Nothing, ids: vec![], spans: vec![] };
    for cmd in &hello {
        let mut out = Vec::new();
        put_resp(cmd, &mut out);
        me.conn.stream.write_all(&out).map_err(|e| conn_error("redis", e))?;
        match me.resp_reply(0) {
            Ok(None) => {}
            Ok(Some(e)) => return Err(conn_error("redis", e)),
            Err(e) => return Err(conn_error("redis", e)),
        }
    }
    me.keep = keep;
    Ok(me)
}

#[pymodule]
fn storebench_fastclient(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<NativeOps>()?;
    m.add_function(wrap_pyfunction!(postgres, m)?)?;
    m.add_function(wrap_pyfunction!(redis, m)?)?;
    m.add_function(wrap_pyfunction!(signals::stop_on_signal, m)?)?;
    m.add_function(wrap_pyfunction!(calls::closed_calls, m)?)?;
    Ok(())
}
