//! In-process loopback: two ends joined by bounded channels, with a shared staging area,
//! for tests of the layers above the transport (the interposer's client, the daemon's
//! dispatch) without sockets or shared memory.

use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TryRecvError, sync_channel};
use std::time::Duration;

use super::sys::Mapping;
use super::{Staging, Transport, TransportError};

/// Frames a direction buffers before `send` waits (back-pressure, as the rings have).
pub const DEFAULT_DEPTH: usize = 1024;

pub struct LoopbackTransport {
    tx: Option<SyncSender<Vec<u8>>>,
    rx: Option<Receiver<Vec<u8>>>,
    max_frame: usize,
    staging: Staging,
}

/// A connected pair. `max_frame` bounds what `send` accepts (as the real transports do);
/// `staging_size` bytes of staging are shared by both ends.
pub fn pair(max_frame: usize, staging_size: usize) -> std::io::Result<(LoopbackTransport, LoopbackTransport)> {
    let map = Arc::new(Mapping::anonymous(staging_size)?);
    let (atx, brx) = sync_channel(DEFAULT_DEPTH);
    let (btx, arx) = sync_channel(DEFAULT_DEPTH);
    let end = |tx, rx, map| LoopbackTransport {
        tx: Some(tx),
        rx: Some(rx),
        max_frame,
        staging: Staging::new(map, 0, staging_size),
    };
    Ok((end(atx, arx, Arc::clone(&map)), end(btx, brx, map)))
}

impl Transport for LoopbackTransport {
    fn send(&mut self, frame: &[u8]) -> Result<(), TransportError> {
        let tx = self.tx.as_ref().ok_or(TransportError::Closed)?;
        if frame.len() > self.max_frame {
            return Err(TransportError::FrameTooLarge { len: frame.len(), max: self.max_frame });
        }
        tx.send(frame.to_vec()).map_err(|_| TransportError::PeerGone)
    }

    fn recv_into(&mut self, buf: &mut Vec<u8>, timeout: Option<Duration>) -> Result<(), TransportError> {
        let rx = self.rx.as_ref().ok_or(TransportError::Closed)?;
        let frame = match timeout {
            None => rx.recv().map_err(|_| TransportError::PeerGone)?,
            Some(Duration::ZERO) => rx.try_recv().map_err(|e| match e {
                TryRecvError::Empty => TransportError::Timeout,
                TryRecvError::Disconnected => TransportError::PeerGone,
            })?,
            Some(t) => rx.recv_timeout(t).map_err(|e| match e {
                RecvTimeoutError::Timeout => TransportError::Timeout,
                RecvTimeoutError::Disconnected => TransportError::PeerGone,
            })?,
        };
        *buf = frame;
        Ok(())
    }

    fn max_frame_len(&self) -> usize {
        self.max_frame
    }

    fn staging(&self) -> Option<&Staging> {
        Some(&self.staging)
    }

    fn close(&mut self) {
        // Dropping our sender ends the peer's receive after it drains; dropping our
        // receiver makes the peer's sends fail.
        self.tx = None;
        self.rx = None;
    }
}
