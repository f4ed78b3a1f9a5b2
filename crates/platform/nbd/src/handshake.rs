//! Fixed-newstyle handshake and option haggling.

use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::backend::Backend;
use crate::limits::Shared;
use crate::protocol::*;
use crate::tls::TlsMode;

/// What the option phase ended with.
pub(crate) enum Outcome {
    /// Enter transmission on this export.
    Transmit(Session),
    /// The client aborted or the connection must be dropped.
    Close,
    /// `NBD_OPT_STARTTLS` was acknowledged: run the TLS handshake, then
    /// continue with [`resume_after_tls`] on the TLS stream.
    StartTls(AfterTls),
}

/// What option haggling carries across the upgrade to TLS.
pub(crate) struct AfterTls {
    no_zeroes: bool,
}

/// Negotiated transmission parameters.
pub(crate) struct Session {
    pub backend: Arc<dyn Backend>,
    pub structured: bool,
    pub flags: u16,
    /// `base:allocation` was selected for this export (BLOCK_STATUS allowed).
    pub base_allocation: bool,
    /// The client requested `NBD_INFO_BLOCK_SIZE` in GO and so promised to
    /// honour the advertised minimum block size; unaligned requests get EINVAL.
    pub enforce_minimum: bool,
}

/// Transmission flags advertised for `backend`.
pub(crate) fn transmission_flags(backend: &dyn Backend, structured: bool) -> u16 {
    let mut f = TFLAG_HAS_FLAGS | TFLAG_SEND_FLUSH | TFLAG_SEND_FUA;
    if backend.is_read_only() {
        f |= TFLAG_READ_ONLY;
    } else {
        if backend.can_trim() {
            f |= TFLAG_SEND_TRIM;
        }
        if backend.can_zero() {
            // FAST_ZERO is always offered with WRITE_ZEROES: a client can then
            // ask "zero only if cheap" and gets ENOTSUP when it is not.
            f |= TFLAG_SEND_WRITE_ZEROES | TFLAG_SEND_FAST_ZERO;
        }
    }
    if backend.can_cache() {
        f |= TFLAG_SEND_CACHE;
    }
    if backend.can_multi_conn() {
        f |= TFLAG_CAN_MULTI_CONN;
    }
    if backend.is_rotational() {
        f |= TFLAG_ROTATIONAL;
    }
    if structured {
        f |= TFLAG_SEND_DF;
    }
    f
}

async fn reply<S: AsyncWrite + Unpin>(
    s: &mut S,
    option: u32,
    reply_type: u32,
    data: &[u8],
) -> std::io::Result<()> {
    s.write_all(&option_reply(option, reply_type, data)).await?;
    s.flush().await
}

/// Parsed `NBD_OPT_INFO`/`NBD_OPT_GO` data.
struct InfoRequest {
    name: String,
    infos: Vec<u16>,
}

fn parse_info(data: &[u8]) -> Result<InfoRequest, String> {
    if data.len() < 6 {
        return Err(format!(
            "option data is {} bytes; INFO/GO needs at least 6 (name length, name, info count)",
            data.len()
        ));
    }
    let name_len = u32::from_be_bytes(data[0..4].try_into().expect("4 bytes")) as usize;
    if name_len > data.len() - 6 {
        return Err(format!(
            "export name length {name_len} exceeds the option data ({} bytes)",
            data.len()
        ));
    }
    let name = std::str::from_utf8(&data[4..4 + name_len])
        .map_err(|_| "export name is not valid UTF-8".to_string())?
        .to_string();
    let rest = &data[4 + name_len..];
    let count = u16::from_be_bytes([rest[0], rest[1]]) as usize;
    if rest.len() != 2 + 2 * count {
        return Err(format!(
            "info request count {count} does not match the {} bytes that follow",
            rest.len() - 2
        ));
    }
    let infos = rest[2..]
        .chunks_exact(2)
        .map(|c| u16::from_be_bytes([c[0], c[1]]))
        .collect();
    Ok(InfoRequest { name, infos })
}

/// Parsed `NBD_OPT_LIST_META_CONTEXT`/`NBD_OPT_SET_META_CONTEXT` data.
struct MetaRequest {
    name: String,
    queries: Vec<String>,
}

fn parse_meta(data: &[u8]) -> Result<MetaRequest, String> {
    fn take<'a>(d: &mut &'a [u8], n: usize, what: &str) -> Result<&'a [u8], String> {
        if d.len() < n {
            return Err(format!("option data ends inside the {what}"));
        }
        let (head, tail) = d.split_at(n);
        *d = tail;
        Ok(head)
    }
    fn u32_at(d: &mut &[u8], what: &str) -> Result<u32, String> {
        let b = take(d, 4, what)?;
        Ok(u32::from_be_bytes(b.try_into().expect("4 bytes")))
    }
    fn string(d: &mut &[u8], what: &str) -> Result<String, String> {
        let len = u32_at(d, what)? as usize;
        if len > 4096 {
            return Err(format!("{what} is {len} bytes; at most 4096 are allowed"));
        }
        let b = take(d, len, what)?;
        String::from_utf8(b.to_vec()).map_err(|_| format!("{what} is not valid UTF-8"))
    }
    let mut d = data;
    let name = string(&mut d, "export name")?;
    let count = u32_at(&mut d, "query count")?;
    let mut queries = Vec::new();
    for _ in 0..count {
        queries.push(string(&mut d, "query")?);
    }
    if !d.is_empty() {
        return Err(format!("{} unexpected bytes after the queries", d.len()));
    }
    Ok(MetaRequest { name, queries })
}

/// Send the `NBD_REP_INFO` replies for one export (INFO and GO answer identically).
async fn send_infos<S: AsyncWrite + Unpin>(
    s: &mut S,
    option: u32,
    name: &str,
    backend: &dyn Backend,
    flags: u16,
    requested: &[u16],
) -> std::io::Result<()> {
    let mut out = Vec::new();
    let mut export = Vec::with_capacity(12);
    export.extend_from_slice(&INFO_EXPORT.to_be_bytes());
    export.extend_from_slice(&backend.size().to_be_bytes());
    export.extend_from_slice(&flags.to_be_bytes());
    out.extend_from_slice(&option_reply(option, REP_INFO, &export));

    let bs = backend.block_size();
    let mut sent = Vec::new();
    // Constraints other than the defaults are sent even unrequested (spec:
    // such a server SHOULD advertise them; clients ignore unknown infos).
    let mut wanted: Vec<u16> = requested.to_vec();
    if bs != crate::BlockSize::default() {
        wanted.push(INFO_BLOCK_SIZE);
    }
    for info in wanted {
        if sent.contains(&info) {
            continue;
        }
        sent.push(info);
        let mut d = Vec::new();
        d.extend_from_slice(&info.to_be_bytes());
        match info {
            INFO_NAME => d.extend_from_slice(name.as_bytes()),
            INFO_DESCRIPTION => match backend.description() {
                Some(desc) => d.extend_from_slice(truncate_utf8(&desc, 4096).as_bytes()),
                None => continue,
            },
            INFO_BLOCK_SIZE => {
                d.extend_from_slice(&bs.minimum.to_be_bytes());
                d.extend_from_slice(&bs.preferred.to_be_bytes());
                d.extend_from_slice(&bs.maximum.to_be_bytes());
            }
            // INFO_EXPORT is always sent; unknown requests are ignored per spec.
            _ => continue,
        }
        out.extend_from_slice(&option_reply(option, REP_INFO, &d));
    }
    out.extend_from_slice(&option_reply(option, REP_ACK, &[]));
    s.write_all(&out).await?;
    s.flush().await
}

/// Option-phase state carried from one option to the next.
struct Haggle {
    /// The client set `NBD_FLAG_C_NO_ZEROES` (EXPORT_NAME omits the 124-byte pad).
    no_zeroes: bool,
    /// Structured replies were negotiated.
    structured: bool,
    /// Export (canonical name) for which base:allocation is selected.
    meta_export: Option<String>,
    /// The connection runs over TLS (STARTTLS succeeded).
    tls: bool,
}

/// What handling one option decided: keep haggling, or end the option phase.
type Step = std::io::Result<Option<Outcome>>;

/// Run the handshake on a fresh connection.
pub(crate) async fn negotiate<S>(s: &mut S, shared: &Shared) -> std::io::Result<Outcome>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let Some(no_zeroes) = greet(s).await? else {
        return Ok(Outcome::Close);
    };
    let st = Haggle {
        no_zeroes,
        structured: false,
        meta_export: None,
        tls: false,
    };
    haggle(s, shared, st).await
}

/// Continue option haggling over the TLS stream after `NBD_OPT_STARTTLS`.
/// Nothing negotiated in plain text carries over (structured replies and
/// meta contexts must be negotiated again, as qemu and nbdkit do), so a
/// man in the middle cannot have chosen them.
pub(crate) async fn resume_after_tls<S>(
    s: &mut S,
    shared: &Shared,
    after: AfterTls,
) -> std::io::Result<Outcome>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let st = Haggle {
        no_zeroes: after.no_zeroes,
        structured: false,
        meta_export: None,
        tls: true,
    };
    haggle(s, shared, st).await
}

/// The option loop, until an option ends it.
async fn haggle<S>(s: &mut S, shared: &Shared, mut st: Haggle) -> std::io::Result<Outcome>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    loop {
        let Some((option, data)) = read_option(s, shared).await? else {
            return Ok(Outcome::Close);
        };
        if let Some(outcome) = dispatch(s, shared, &mut st, option, &data).await? {
            return Ok(outcome);
        }
    }
}

/// Send the server greeting and read the client flags, so option haggling
/// starts only with a fixed-newstyle client; returns whether it asked for
/// NO_ZEROES, or `None` when it sent unknown flags and must be dropped.
async fn greet<S>(s: &mut S) -> std::io::Result<Option<bool>>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut greeting = Vec::with_capacity(18);
    greeting.extend_from_slice(&NBDMAGIC.to_be_bytes());
    greeting.extend_from_slice(&IHAVEOPT.to_be_bytes());
    greeting.extend_from_slice(&(FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES).to_be_bytes());
    s.write_all(&greeting).await?;
    s.flush().await?;

    let client_flags = s.read_u32().await?;
    if client_flags & !(FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES) != 0 {
        tracing::debug!("client sent unknown flags {client_flags:#x}; disconnecting");
        return Ok(None);
    }
    Ok(Some(client_flags & FLAG_C_NO_ZEROES != 0))
}

/// Read one option header and its data, refusing oversized data unread (so a
/// client cannot tie the server up) and options during shutdown; `None` means
/// the connection must be closed.
async fn read_option<S>(s: &mut S, shared: &Shared) -> std::io::Result<Option<(u32, Vec<u8>)>>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let magic = s.read_u64().await?;
    if magic != IHAVEOPT {
        tracing::debug!("bad option magic {magic:#x}; disconnecting");
        return Ok(None);
    }
    let option = s.read_u32().await?;
    let len = s.read_u32().await?;
    if len > shared.limits.max_option_len {
        // Never read (or drain) oversized option data: a client announcing
        // up to 4 GiB would tie the server up (QEMU CVE-2017-15119).
        // Tell the client why (best effort) and close.
        tracing::debug!(
            "option {option} announces {len} bytes (limit {}); disconnecting",
            shared.limits.max_option_len
        );
        if option != OPT_EXPORT_NAME {
            let msg = format!(
                "option data of {len} bytes exceeds the limit of {} bytes; disconnecting",
                shared.limits.max_option_len
            );
            let _ = reply(s, option, REP_ERR_TOO_BIG, msg.as_bytes()).await;
        }
        return Ok(None);
    }
    let mut data = vec![0u8; len as usize];
    s.read_exact(&mut data).await?;

    if shared.cancel.is_cancelled() {
        if option != OPT_EXPORT_NAME {
            reply(s, option, REP_ERR_SHUTDOWN, b"server is shutting down").await?;
        }
        return Ok(None);
    }
    Ok(Some((option, data)))
}

/// Route one option to its handler, so each option's rules live in one place.
async fn dispatch<S>(s: &mut S, shared: &Shared, st: &mut Haggle, option: u32, data: &[u8]) -> Step
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    if !st.tls
        && shared
            .tls
            .as_ref()
            .is_some_and(|t| t.mode() == TlsMode::Require)
        && !matches!(option, OPT_STARTTLS | OPT_ABORT)
    {
        return tls_required(s, option).await;
    }
    match option {
        OPT_EXPORT_NAME => opt_export_name(s, shared, st, data).await,
        OPT_ABORT => {
            // The client may already have closed; that is fine.
            let _ = reply(s, option, REP_ACK, &[]).await;
            Ok(Some(Outcome::Close))
        }
        OPT_LIST => opt_list(s, shared, option, data).await,
        OPT_STRUCTURED_REPLY => opt_structured_reply(s, st, option, data).await,
        OPT_INFO | OPT_GO => opt_info_go(s, shared, st, option, data).await,
        OPT_LIST_META_CONTEXT | OPT_SET_META_CONTEXT => {
            opt_meta_context(s, shared, st, option, data).await
        }
        OPT_STARTTLS => opt_starttls(s, shared, st, option, data).await,
        _ => {
            let msg = format!("option {option} is not supported by this server");
            reply(s, option, REP_ERR_UNSUP, msg.as_bytes()).await?;
            Ok(None)
        }
    }
}

/// FORCEDTLS, before TLS is up: `NBD_OPT_EXPORT_NAME` cannot be answered
/// with an error, so the connection is closed; any other option gets
/// `NBD_REP_ERR_TLS_REQD`.
async fn tls_required<S>(s: &mut S, option: u32) -> Step
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    if option == OPT_EXPORT_NAME {
        tracing::debug!(
            "NBD_OPT_EXPORT_NAME without TLS on a server that requires it; disconnecting"
        );
        return Ok(Some(Outcome::Close));
    }
    let msg = b"this server requires TLS: send NBD_OPT_STARTTLS first";
    reply(s, option, REP_ERR_TLS_REQD, msg).await?;
    Ok(None)
}

/// `NBD_OPT_STARTTLS`: acknowledge, then the caller upgrades the connection.
/// Refused with `ERR_POLICY` when TLS is off, `ERR_INVALID` when it is
/// already up or the option carries data.
async fn opt_starttls<S>(s: &mut S, shared: &Shared, st: &Haggle, option: u32, data: &[u8]) -> Step
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let refusal: Option<(u32, &[u8])> = if shared.tls.is_none() {
        Some((REP_ERR_POLICY, b"TLS is not enabled on this server"))
    } else if st.tls {
        Some((REP_ERR_INVALID, b"TLS is already active"))
    } else if !data.is_empty() {
        Some((REP_ERR_INVALID, b"NBD_OPT_STARTTLS takes no data"))
    } else {
        None
    };
    if let Some((code, msg)) = refusal {
        reply(s, option, code, msg).await?;
        return Ok(None);
    }
    reply(s, option, REP_ACK, &[]).await?;
    Ok(Some(Outcome::StartTls(AfterTls {
        no_zeroes: st.no_zeroes,
    })))
}

/// `NBD_OPT_EXPORT_NAME`: enter transmission on the named export; it has no
/// error reply, so a bad or unknown name disconnects.
async fn opt_export_name<S>(s: &mut S, shared: &Shared, st: &Haggle, data: &[u8]) -> Step
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let Ok(name) = std::str::from_utf8(data) else {
        return Ok(Some(Outcome::Close));
    };
    // No error can be reported for EXPORT_NAME: unknown name -> disconnect.
    let Some((canonical, backend)) = shared.lookup(name) else {
        tracing::debug!("unknown export {name:?} via EXPORT_NAME; disconnecting");
        return Ok(Some(Outcome::Close));
    };
    let base_allocation = st.meta_export.as_ref() == Some(canonical);
    let backend = Arc::clone(backend);
    let flags = transmission_flags(&*backend, st.structured);
    let mut out = Vec::with_capacity(134);
    out.extend_from_slice(&backend.size().to_be_bytes());
    out.extend_from_slice(&flags.to_be_bytes());
    if !st.no_zeroes {
        out.extend_from_slice(&[0u8; 124]);
    }
    s.write_all(&out).await?;
    s.flush().await?;
    Ok(Some(Outcome::Transmit(Session {
        backend,
        structured: st.structured,
        flags,
        base_allocation,
        enforce_minimum: false,
    })))
}

/// `NBD_OPT_LIST`: name every export, so clients can discover them.
async fn opt_list<S>(s: &mut S, shared: &Shared, option: u32, data: &[u8]) -> Step
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    if !data.is_empty() {
        reply(s, option, REP_ERR_INVALID, b"NBD_OPT_LIST takes no data").await?;
        return Ok(None);
    }
    let mut out = Vec::new();
    for (name, _) in &shared.exports {
        let mut d = Vec::with_capacity(4 + name.len());
        d.extend_from_slice(&(name.len() as u32).to_be_bytes());
        d.extend_from_slice(name.as_bytes());
        out.extend_from_slice(&option_reply(option, REP_SERVER, &d));
    }
    out.extend_from_slice(&option_reply(option, REP_ACK, &[]));
    s.write_all(&out).await?;
    s.flush().await?;
    Ok(None)
}

/// `NBD_OPT_STRUCTURED_REPLY`: switch on structured replies (once only), which
/// meta contexts and BLOCK_STATUS depend on.
async fn opt_structured_reply<S>(s: &mut S, st: &mut Haggle, option: u32, data: &[u8]) -> Step
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    if !data.is_empty() {
        let msg = b"NBD_OPT_STRUCTURED_REPLY takes no data";
        reply(s, option, REP_ERR_INVALID, msg).await?;
    } else if st.structured {
        let msg = b"structured replies already negotiated";
        reply(s, option, REP_ERR_INVALID, msg).await?;
    } else {
        st.structured = true;
        reply(s, option, REP_ACK, &[]).await?;
    }
    Ok(None)
}

/// `NBD_OPT_INFO` / `NBD_OPT_GO`: describe the named export, and for GO enter
/// transmission on it with the negotiated parameters.
async fn opt_info_go<S>(s: &mut S, shared: &Shared, st: &Haggle, option: u32, data: &[u8]) -> Step
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let req = match parse_info(data) {
        Ok(r) => r,
        Err(msg) => {
            reply(s, option, REP_ERR_INVALID, msg.as_bytes()).await?;
            return Ok(None);
        }
    };
    let Some((canonical, backend)) = shared.lookup(&req.name) else {
        let msg = format!(
            "unknown export {:?}; available: {}",
            req.name,
            shared.export_names()
        );
        reply(s, option, REP_ERR_UNKNOWN, msg.as_bytes()).await?;
        return Ok(None);
    };
    let backend = Arc::clone(backend);
    let canonical = canonical.clone();
    let flags = transmission_flags(&*backend, st.structured);
    let name = if req.name.is_empty() {
        canonical.clone()
    } else {
        req.name.clone()
    };
    send_infos(s, option, &name, &*backend, flags, &req.infos).await?;
    if option == OPT_GO {
        return Ok(Some(Outcome::Transmit(Session {
            backend,
            structured: st.structured,
            flags,
            base_allocation: st.meta_export.as_ref() == Some(&canonical),
            enforce_minimum: req.infos.contains(&INFO_BLOCK_SIZE),
        })));
    }
    Ok(None)
}

/// `NBD_OPT_LIST_META_CONTEXT` / `NBD_OPT_SET_META_CONTEXT`: report (and for
/// SET, select) `base:allocation`, the only context served, for BLOCK_STATUS.
async fn opt_meta_context<S>(
    s: &mut S,
    shared: &Shared,
    st: &mut Haggle,
    option: u32,
    data: &[u8],
) -> Step
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    if !st.structured {
        let msg = b"metadata contexts need structured replies to be negotiated first";
        reply(s, option, REP_ERR_INVALID, msg).await?;
        return Ok(None);
    }
    let req = match parse_meta(data) {
        Ok(r) => r,
        Err(msg) => {
            reply(s, option, REP_ERR_INVALID, msg.as_bytes()).await?;
            return Ok(None);
        }
    };
    let Some((canonical, _)) = shared.lookup(&req.name) else {
        let msg = format!("unknown export {:?}", req.name);
        reply(s, option, REP_ERR_UNKNOWN, msg.as_bytes()).await?;
        return Ok(None);
    };
    let selected = if option == OPT_LIST_META_CONTEXT {
        req.queries.is_empty()
            || req
                .queries
                .iter()
                .any(|q| q == "base:" || q == BASE_ALLOCATION)
    } else {
        req.queries.iter().any(|q| q == BASE_ALLOCATION)
    };
    let mut out = Vec::new();
    if selected {
        let mut d = BASE_ALLOCATION_ID.to_be_bytes().to_vec();
        d.extend_from_slice(BASE_ALLOCATION.as_bytes());
        out.extend_from_slice(&option_reply(option, REP_META_CONTEXT, &d));
    }
    out.extend_from_slice(&option_reply(option, REP_ACK, &[]));
    if option == OPT_SET_META_CONTEXT {
        st.meta_export = selected.then(|| canonical.clone());
    }
    s.write_all(&out).await?;
    s.flush().await?;
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn info_request_parsing_validates_lengths() {
        // name "ab", two info requests (NAME, BLOCK_SIZE)
        let d = [0, 0, 0, 2, b'a', b'b', 0, 2, 0, 1, 0, 3];
        let r = parse_info(&d).unwrap();
        assert_eq!(r.name, "ab");
        assert_eq!(r.infos, vec![INFO_NAME, INFO_BLOCK_SIZE]);
        // count claims 3 requests but only 2 follow
        let bad = [0, 0, 0, 2, b'a', b'b', 0, 3, 0, 1, 0, 3];
        assert!(parse_info(&bad).is_err());
        // name length runs past the data
        assert!(parse_info(&[0, 0, 0, 9, 0, 0]).is_err());
        assert!(parse_info(&[0, 0]).is_err());
    }

    #[test]
    fn meta_request_parsing_validates_lengths() {
        let mut d = vec![0, 0, 0, 1, b'x', 0, 0, 0, 2];
        for q in ["base:", "qemu:dirty"] {
            d.extend_from_slice(&(q.len() as u32).to_be_bytes());
            d.extend_from_slice(q.as_bytes());
        }
        let r = parse_meta(&d).unwrap();
        assert_eq!(r.name, "x");
        assert_eq!(r.queries, vec!["base:", "qemu:dirty"]);
        assert!(parse_meta(&d[..d.len() - 1]).is_err());
        let mut extra = d.clone();
        extra.push(0);
        assert!(parse_meta(&extra).is_err());
    }
}
