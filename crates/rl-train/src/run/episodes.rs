//! `episodes.csv`: one row per finished episode, training and evaluation in one file,
//! with the columns of Stable-Baselines3's `monitor.csv` first:
//!
//! | column | what |
//! |---|---|
//! | `r` | the episode's undiscounted return |
//! | `l` | its length (steps) |
//! | `t` | seconds of training over the run's life when the trainer saw it end (after the collection that finished it; across resumes, like `wall_s`) |
//! | `env_steps` | env steps of the run just after its last step (an evaluation episode: the env steps at which the evaluation ran) |
//! | `kind` | `train` or `eval` |
//!
//! Unlike `monitor.csv` there is no `#{...}` comment line: `pandas.read_csv` reads it
//! as it is (`df[df.kind == "train"]`). Every row is written whole and flushed; a
//! resumed run first cuts a torn last row and moves the rows past its checkpoint to
//! `episodes.discarded.csv` ([`repair`]), so no episode is counted twice.

use std::fmt::Write as _;
use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::path::{Path, PathBuf};

use crate::trainer::{EpisodeEnd, EpisodeKind};

use super::{Error, Result};

/// The episodes of a run, one CSV row each.
pub const EPISODES_FILE: &str = "episodes.csv";
/// Where `episodes.csv` rows past the checkpoint go when a run resumes.
pub const DISCARDED_EPISODES_FILE: &str = "episodes.discarded.csv";
/// The header row.
const HEADER: &str = "r,l,t,env_steps,kind\n";

/// Appends rows to `episodes.csv`, each in one write.
pub(crate) struct EpisodeLog {
    file: File,
    path: PathBuf,
    /// The row being written (kept, so rows allocate nothing once it has grown).
    row: String,
}

impl EpisodeLog {
    /// Opens `dir/episodes.csv` for appending (with its header when new).
    pub(crate) fn open(dir: &Path) -> Result<Self> {
        let path = dir.join(EPISODES_FILE);
        let mut file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|e| Error::io("opening", &path, e))?;
        let empty = file
            .metadata()
            .map_err(|e| Error::io("reading", &path, e))?
            .len()
            == 0;
        if empty {
            file.write_all(HEADER.as_bytes())
                .map_err(|e| Error::io("writing", &path, e))?;
        }
        Ok(Self {
            file,
            path,
            row: String::with_capacity(128),
        })
    }

    /// Writes the row of `episode`.
    pub(crate) fn write(&mut self, episode: &EpisodeEnd) -> Result<()> {
        self.row.clear();
        let kind = match episode.kind {
            EpisodeKind::Train => "train",
            EpisodeKind::Eval => "eval",
        };
        // Writing into a String cannot fail.
        let _ = writeln!(
            self.row,
            "{},{},{:.6},{},{kind}",
            episode.episode_return, episode.length, episode.wall_s, episode.env_steps
        );
        self.file
            .write_all(self.row.as_bytes())
            .map_err(|e| Error::io("writing", &self.path, e))
    }
}

/// A row of `episodes.csv`: `None` for one that is not whole, else its `env_steps`
/// (`Some(None)`: the header).
fn row_steps(row: &str) -> Option<Option<u64>> {
    if row == HEADER {
        return Some(None);
    }
    let fields: Vec<&str> = row.trim_end().split(',').collect();
    match fields.as_slice() {
        [r, l, t, steps, "train" | "eval"]
            if r.parse::<f64>().is_ok() && l.parse::<u64>().is_ok() && t.parse::<f64>().is_ok() =>
        {
            steps.parse().ok().map(Some)
        }
        _ => None,
    }
}

/// Makes `dir/episodes.csv` fit a run resumed at `env_steps`: a torn last row (no
/// newline, or not a row) is cut off, and rows past `env_steps` are appended to
/// `episodes.discarded.csv`.
pub(crate) fn repair(dir: &Path, env_steps: u64) -> Result<()> {
    super::rundir::cut_back(
        dir,
        EPISODES_FILE,
        DISCARDED_EPISODES_FILE,
        env_steps,
        row_steps,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn episode(kind: EpisodeKind, length: u64, env_steps: u64) -> EpisodeEnd {
        EpisodeEnd {
            kind,
            episode_return: length as f64 * 0.5,
            length,
            env_steps,
            wall_s: 1.25,
        }
    }

    #[test]
    fn rows_are_written_and_cut_back_on_resume() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = EpisodeLog::open(dir.path()).unwrap();
        log.write(&episode(EpisodeKind::Train, 10, 80)).unwrap();
        log.write(&episode(EpisodeKind::Eval, 500, 100)).unwrap();
        log.write(&episode(EpisodeKind::Train, 30, 160)).unwrap();
        drop(log);
        let path = dir.path().join(EPISODES_FILE);
        let text = fs::read_to_string(&path).unwrap();
        assert_eq!(
            text,
            "r,l,t,env_steps,kind\n5,10,1.250000,80,train\n250,500,1.250000,100,eval\n15,30,1.250000,160,train\n"
        );
        // A kill in the middle of a row, then a resume from the checkpoint at 100.
        fs::write(&path, format!("{text}7,1")).unwrap();
        repair(dir.path(), 100).unwrap();
        assert_eq!(
            fs::read_to_string(&path).unwrap(),
            "r,l,t,env_steps,kind\n5,10,1.250000,80,train\n250,500,1.250000,100,eval\n"
        );
        assert_eq!(
            fs::read_to_string(dir.path().join(DISCARDED_EPISODES_FILE)).unwrap(),
            "15,30,1.250000,160,train\n"
        );
        // Reopened: no second header.
        let mut log = EpisodeLog::open(dir.path()).unwrap();
        log.write(&episode(EpisodeKind::Train, 2, 120)).unwrap();
        let text = fs::read_to_string(&path).unwrap();
        assert_eq!(text.matches("r,l,t").count(), 1);
        assert!(text.ends_with("1,2,1.250000,120,train\n"));
    }
}
