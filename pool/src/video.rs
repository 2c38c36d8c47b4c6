//! A session's recording made into a video: its frames (JPEGs, each shown from the time it
//! came until the next) encoded by ffmpeg (the distribution's, never an encoder of ours) into
//! WebM (VP8) at the session's viewport size, with the frames' real timing: a still page holds
//! its frame. ffmpeg reads only the frame directory (`-safe`, file protocol alone), runs as
//! an unprivileged uid when the server is root, at nice 10, and is killed past its time limit
//! or with the server.

use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::outcome::Viewport;

/// The uid and gid ffmpeg runs as when the server is root (`nobody`): it then reads frames
/// and writes the video in a directory this uid owns, and nothing else of the server's.
pub const ENCODER_UID: u32 = 65534;

/// The nice value ffmpeg runs at.
const ENCODER_NICE: libc::c_int = 10;

/// The frames of one recording, as its writer left them.
#[derive(Debug)]
pub struct Frames {
    pub dir: PathBuf,
    /// When each frame came, from the recording's start; frame `i` is [`Frames::path`]`(i)`.
    pub times: Vec<Duration>,
    /// Why frames stopped being written before the end (a full disk), if they did.
    pub stopped: Option<String>,
    /// The recording's length.
    pub end: Duration,
    /// The session's viewport: the video's size.
    pub viewport: Viewport,
}

impl Frames {
    pub fn path(&self, index: usize) -> PathBuf {
        self.dir.join(format!("{index:06}.jpg"))
    }

    /// ffmpeg's concat list: each frame for as long as it was shown. The last frame is named
    /// twice, as the concat demuxer takes the duration of all but the last entry.
    fn concat_list(&self) -> String {
        let mut list = String::from("ffconcat version 1.0\n");
        for (i, at) in self.times.iter().enumerate() {
            let next = self.times.get(i + 1).copied().unwrap_or(self.end.max(*at));
            // A frame shown for no time still gets a millisecond, so none is dropped unseen.
            let shown = next.saturating_sub(*at).max(Duration::from_millis(1));
            list.push_str(&format!("file {i:06}.jpg\nduration {:.3}\n", shown.as_secs_f64()));
        }
        if let Some(last) = self.times.len().checked_sub(1) {
            list.push_str(&format!("file {last:06}.jpg\n"));
        }
        list
    }
}

/// What an encoding made.
#[derive(Debug)]
pub struct Video {
    pub path: PathBuf,
    pub frames: usize,
}

/// Why there is no video.
#[derive(Debug, thiserror::Error)]
pub enum VideoError {
    #[error("the recording has no frame (the page never painted)")]
    NoFrames,
    #[error("ffmpeg could not be started ({0}): install it (apt-get install -y ffmpeg)")]
    NoEncoder(std::io::Error),
    #[error("ffmpeg failed: {0}")]
    Failed(String),
    #[error("ffmpeg took longer than {0:?}")]
    TimedOut(Duration),
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// Where ffmpeg is, if it is on PATH (checked at the server's start, so a missing encoder is
/// said then, not at a session's end). Found, not run: `ffmpeg -version` took about 60 ms of
/// CPU at every start, beside the first workers' boots; an ffmpeg that is there but fails to
/// run says so when a recording is encoded (`VideoError::Failed`).
pub fn find_encoder() -> Result<PathBuf, VideoError> {
    crate::launcher::search_path("ffmpeg")
        .ok_or_else(|| VideoError::NoEncoder(std::io::Error::new(std::io::ErrorKind::NotFound, "not found on PATH")))
}

/// Encodes `frames` into `<frames.dir>/video.webm` at the viewport's size (rounded up to even
/// sides, as the encoder needs). Blocking: run it off the async threads.
pub fn encode(frames: &Frames, limit: Duration) -> Result<Video, VideoError> {
    if frames.times.is_empty() {
        return Err(VideoError::NoFrames);
    }
    let list = frames.dir.join("frames.txt");
    std::fs::File::create(&list)?.write_all(frames.concat_list().as_bytes())?;
    let out = frames.dir.join("video.webm");
    let viewport = &frames.viewport;
    let (w, h) = (viewport.width + viewport.width % 2, viewport.height + viewport.height % 2);
    let filter =
        format!("scale={w}:{h}:force_original_aspect_ratio=decrease,pad={w}:{h}:(ow-iw)/2:(oh-ih)/2,format=yuv420p");
    let mut cmd = std::process::Command::new("ffmpeg");
    cmd.current_dir(&frames.dir)
        .args(["-nostdin", "-hide_banner", "-loglevel", "error", "-protocol_whitelist", "file"])
        .args(["-f", "concat", "-safe", "1", "-i", "frames.txt"])
        .args(["-vf", &filter, "-fps_mode", "passthrough", "-an"])
        .args(["-c:v", "libvpx", "-deadline", "realtime", "-cpu-used", "16", "-b:v", "1M", "-threads", "1"])
        .args(["-y", "video.webm"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    if is_root() {
        cmd.uid(ENCODER_UID).gid(ENCODER_UID);
    }
    // Encoding is background work: live sessions' browsers come first. It dies with the
    // thread waiting for it, so a server killed mid-encoding leaves no ffmpeg behind (set here,
    // after the uid change, which would clear it).
    // SAFETY: setpriority and prctl are async-signal-safe and touch no memory of the parent.
    unsafe {
        cmd.pre_exec(|| {
            libc::setpriority(libc::PRIO_PROCESS, 0, ENCODER_NICE);
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    let mut child = cmd.spawn().map_err(VideoError::NoEncoder)?;
    let stderr = child.stderr.take();
    let drain = std::thread::spawn(move || {
        let mut text = String::new();
        if let Some(mut err) = stderr {
            let _ = std::io::Read::read_to_string(&mut std::io::Read::take(&mut err, 64 << 10), &mut text);
        }
        text
    });
    let began = std::time::Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if began.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            return Err(VideoError::TimedOut(limit));
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let errors = drain.join().unwrap_or_default();
    if !status.success() {
        return Err(VideoError::Failed(format!("{status}: {}", errors.trim())));
    }
    Ok(Video { path: out, frames: frames.times.len() })
}

/// Makes a recording's frame directory: the server's, or the encoder's uid's when the server
/// is root (owner only either way).
pub fn make_frames_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new().mode(0o700).create(dir)?;
    if is_root() {
        std::os::unix::fs::chown(dir, Some(ENCODER_UID), Some(ENCODER_UID))?;
    }
    Ok(())
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_frame_lasts_until_the_next_and_the_last_until_the_end() {
        let ms = Duration::from_millis;
        let frames = Frames {
            dir: PathBuf::new(),
            times: vec![ms(0), ms(250), ms(250)],
            stopped: None,
            end: ms(2250),
            viewport: Viewport::default(),
        };
        assert_eq!(
            frames.concat_list(),
            "ffconcat version 1.0\nfile 000000.jpg\nduration 0.250\nfile 000001.jpg\nduration 0.001\n\
             file 000002.jpg\nduration 2.000\nfile 000002.jpg\n"
        );
        let none = Frames { times: vec![], ..frames };
        assert_eq!(none.concat_list(), "ffconcat version 1.0\n");
    }
}
