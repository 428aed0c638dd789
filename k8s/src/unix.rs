//! gRPC over unix sockets, as the kubelet speaks it: a listener that replaces a stale socket
//! left by an earlier run, and a channel that dials a socket path (the URI tonic needs is a
//! placeholder; the connector ignores it).

use hyper_util::rt::TokioIo;
use std::io;
use std::path::{Path, PathBuf};
use tokio::net::{UnixListener, UnixStream};
use tokio_stream::wrappers::UnixListenerStream;
use tonic::transport::{Channel, Endpoint};

/// Binds `path` for a gRPC server (`Server::serve_with_incoming*`). A socket already there is
/// a previous run's (the kubelet removes plugin sockets, but a killed plugin leaves its own):
/// it is removed; anything else at `path` is an error, not deleted.
pub fn listen(path: &Path) -> io::Result<UnixListenerStream> {
    use std::os::unix::fs::FileTypeExt as _;
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() => std::fs::remove_file(path)?,
        Ok(_) => {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("{} exists and is not a socket", path.display()),
            ));
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    Ok(UnixListenerStream::new(UnixListener::bind(path)?))
}

/// A channel to the gRPC server on the unix socket `path`, connected now (so a missing socket
/// is an error here, not on the first call).
pub async fn dial(path: &Path) -> Result<Channel, tonic::transport::Error> {
    let path: PathBuf = path.to_owned();
    Endpoint::from_static("http://[::]:50051")
        .connect_with_connector(tower::service_fn(move |_: tonic::transport::Uri| {
            let path = path.clone();
            async move { UnixStream::connect(path).await.map(TokioIo::new) }
        }))
        .await
}

/// What identifies the socket file at `path` now (device and inode), to notice that it was
/// recreated: the kubelet makes a new `kubelet.sock` each time it starts.
pub fn identity(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt as _;
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}
