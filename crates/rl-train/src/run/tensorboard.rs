//! TensorBoard event files: every line of `metrics.jsonl` also goes, as it is written,
//! to `tb/events.out.tfevents.<unix secs>.<host>.<pid>.<n>` in the run directory, so
//! `tensorboard --logdir runs/` (or `tbparse`, or TensorBoard's `EventAccumulator`)
//! reads a run while it trains. The step of every value is the line's `env_steps`.
//!
//! Tags follow Stable-Baselines3's names where SB3 has one; every other metric goes
//! under `train/<name>`:
//!
//! | metrics.jsonl | TensorBoard tag |
//! |---|---|
//! | `return_mean` | `rollout/ep_rew_mean` |
//! | `length_mean` | `rollout/ep_len_mean` |
//! | `return_window` | `rollout/return_window` |
//! | `epsilon` (DQN) | `rollout/exploration_rate` |
//! | `episodes` | `time/episodes` |
//! | `wall_s` | `time/time_elapsed` |
//! | `env_steps_per_s` | `time/fps` |
//! | `updates` | `train/n_updates` |
//! | `policy_loss` (PPO) | `train/policy_gradient_loss` |
//! | `value_loss` (PPO) | `train/value_loss` |
//! | `entropy` (PPO, SAC) | `train/entropy_loss`, **negated** (SB3 logs `-entropy`) |
//! | `approx_kl`, `clip_fraction`, `explained_variance`, `learning_rate`, `clip_range` (PPO) | `train/<same>` |
//! | `actor_loss`, `critic_loss` (SAC) | `train/<same>` |
//! | `alpha` (SAC) | `train/ent_coef` |
//! | `loss` (DQN) | `train/loss` |
//! | `eval_return_mean` | `eval/mean_reward` |
//! | `eval_return_std` | `eval/std_reward` |
//! | `eval_episodes` | `eval/episodes` |
//! | `rss_bytes`, `planned_bytes` | `memory/rss_bytes`, `memory/planned_bytes` |
//! | any other learner statistic (`grad_norm`, `mean_q` ...) | `train/<name>` |
//!
//! Values are `float32` scalars (`simple_value`); `true`/`false` are 1 and 0; `null`
//! (no value yet) writes nothing. The evaluation's mean episode length is not in
//! `metrics.jsonl`, so there is no `eval/mean_ep_length`.
//!
//! The format, written here without a protobuf library: TFRecord framing (the data's
//! length as a little-endian `u64`, the masked CRC-32C of those 8 bytes, the data, the
//! masked CRC-32C of the data; mask `((crc >> 15) | (crc << 17)) + 0xa282ead8`) around
//! one `tensorflow.Event` protobuf per record: `wall_time` (double, 1), `step` (int64,
//! 2), `file_version` (string, 3: `"brain.Event:2"`, in the first record) or
//! `summary` (5) with repeated `value` (1) of `tag` (string, 1) and `simple_value`
//! (float, 2).
//!
//! A resumed run writes a new file beside the old ones (TensorBoard reads them all, in
//! name order); before that, [`cut`] rewrites each old file without the records past
//! the checkpoint's env steps and without a torn last record, as `metrics.jsonl` is cut,
//! so no step appears twice.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value};

use super::{Error, Result};

/// The folder of a run directory that holds its event files.
pub const TENSORBOARD_DIR: &str = "tb";

/// The metrics keys with an SB3 tag (see the module's table); `entropy` is apart, as it
/// changes sign.
const TAGS: [(&str, &str); 23] = [
    ("return_mean", "rollout/ep_rew_mean"),
    ("length_mean", "rollout/ep_len_mean"),
    ("return_window", "rollout/return_window"),
    ("epsilon", "rollout/exploration_rate"),
    ("episodes", "time/episodes"),
    ("wall_s", "time/time_elapsed"),
    ("env_steps_per_s", "time/fps"),
    ("updates", "train/n_updates"),
    ("policy_loss", "train/policy_gradient_loss"),
    ("value_loss", "train/value_loss"),
    ("approx_kl", "train/approx_kl"),
    ("clip_fraction", "train/clip_fraction"),
    ("explained_variance", "train/explained_variance"),
    ("learning_rate", "train/learning_rate"),
    ("clip_range", "train/clip_range"),
    ("actor_loss", "train/actor_loss"),
    ("critic_loss", "train/critic_loss"),
    ("alpha", "train/ent_coef"),
    ("loss", "train/loss"),
    ("eval_return_mean", "eval/mean_reward"),
    ("eval_return_std", "eval/std_reward"),
    ("eval_episodes", "eval/episodes"),
    ("rss_bytes", "memory/rss_bytes"),
];

/// The tag of a metrics key and the factor its value is written with.
pub(crate) fn tag(key: &str) -> (String, f64) {
    if key == "entropy" {
        return ("train/entropy_loss".to_owned(), -1.0);
    }
    if key == "planned_bytes" {
        return ("memory/planned_bytes".to_owned(), 1.0);
    }
    TAGS.iter().find(|(name, _)| *name == key).map_or_else(
        || (format!("train/{key}"), 1.0),
        |(_, tag)| ((*tag).to_owned(), 1.0),
    )
}

/// The scalar a metrics value is written as (`None`: nothing written).
fn scalar(value: &Value) -> Option<f64> {
    match value {
        Value::Number(n) => n.as_f64(),
        Value::Bool(b) => Some(f64::from(u8::from(*b))),
        _ => None,
    }
}

/// Appends to one event file, a record per metrics line, each written whole and
/// flushed.
pub(crate) struct EventWriter {
    file: File,
    path: PathBuf,
}

impl EventWriter {
    /// Creates a new event file in `dir` (made if missing) and writes its version
    /// record.
    pub(crate) fn create(dir: &Path) -> Result<Self> {
        fs::create_dir_all(dir).map_err(|e| Error::io("creating", dir, e))?;
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let host = fs::read_to_string("/proc/sys/kernel/hostname")
            .ok()
            .or_else(|| std::env::var("HOSTNAME").ok())
            .map(|h| h.trim().replace(['/', '\\'], "_"))
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| "localhost".to_owned());
        let pid = std::process::id();
        let mut n = 0u32;
        let (file, path) = loop {
            let path = dir.join(format!("events.out.tfevents.{now}.{host}.{pid}.{n}"));
            match OpenOptions::new().write(true).create_new(true).open(&path) {
                Ok(file) => break (file, path),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && n < 1000 => n += 1,
                Err(e) => return Err(Error::io("creating", &path, e)),
            }
        };
        let mut writer = Self { file, path };
        let version = encode_event(&Event {
            wall_time: wall_time(),
            step: 0,
            file_version: Some("brain.Event:2".to_owned()),
            values: Vec::new(),
        });
        writer.append(&version)?;
        Ok(writer)
    }

    /// Writes the values of one metrics line at step `env_steps` (a line without
    /// `env_steps` or without any value writes nothing).
    pub(crate) fn write_line(&mut self, line: &Map<String, Value>) -> Result<()> {
        let Some(step) = line.get("env_steps").and_then(Value::as_u64) else {
            return Ok(());
        };
        let values: Vec<(String, f32)> = line
            .iter()
            .filter(|(key, _)| key.as_str() != "env_steps")
            .filter_map(|(key, value)| {
                let (tag, factor) = tag(key);
                scalar(value).map(|v| (tag, (v * factor) as f32))
            })
            .collect();
        if values.is_empty() {
            return Ok(());
        }
        let event = Event {
            wall_time: wall_time(),
            step: i64::try_from(step).unwrap_or(i64::MAX),
            file_version: None,
            values,
        };
        self.append(&encode_event(&event))
    }

    fn append(&mut self, data: &[u8]) -> Result<()> {
        self.file
            .write_all(&frame(data))
            .and_then(|()| self.file.flush())
            .map_err(|e| Error::io("writing", &self.path, e))
    }
}

fn wall_time() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// Rewrites every event file in `dir` (a run's `tb/`) for a run resumed at
/// `env_steps`: records past `env_steps` and a torn or damaged tail are dropped
/// (nothing else changes; a file with nothing to drop is left as it is).
pub(crate) fn cut(dir: &Path, env_steps: u64) -> Result<()> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(Error::io("reading", dir, e)),
    };
    for entry in entries {
        let path = entry.map_err(|e| Error::io("reading", dir, e))?.path();
        let is_events = path
            .file_name()
            .is_some_and(|n| n.to_string_lossy().contains("tfevents"));
        if !is_events || path.extension().is_some_and(|e| e == "partial") {
            continue;
        }
        let bytes = fs::read(&path).map_err(|e| Error::io("reading", &path, e))?;
        let (records, whole) = records(&bytes);
        let mut kept = Vec::with_capacity(bytes.len());
        let mut dropped = !whole;
        for data in records {
            let past = decode_event(data)
                .is_none_or(|event| event.file_version.is_none() && event.step > env_steps as i64);
            if past {
                dropped = true;
            } else {
                kept.extend_from_slice(&frame(data));
            }
        }
        if dropped {
            let mut partial = path.as_os_str().to_owned();
            partial.push(".partial");
            let partial = PathBuf::from(partial);
            fs::write(&partial, &kept)
                .and_then(|()| fs::rename(&partial, &path))
                .map_err(|e| Error::io("writing", &path, e))?;
        }
    }
    Ok(())
}

/// One `tensorflow.Event`, as much of it as this module writes.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Event {
    pub(crate) wall_time: f64,
    pub(crate) step: i64,
    pub(crate) file_version: Option<String>,
    /// `summary.value`: tag and `simple_value`.
    pub(crate) values: Vec<(String, f32)>,
}

fn masked_crc(bytes: &[u8]) -> u32 {
    let crc = crc32c::crc32c(bytes);
    // ((crc >> 15) | (crc << 17)) + 0xa282ead8, as TensorFlow masks it.
    crc.rotate_right(15).wrapping_add(0xa282_ead8)
}

/// `data` as one TFRecord.
fn frame(data: &[u8]) -> Vec<u8> {
    let len = (data.len() as u64).to_le_bytes();
    let mut out = Vec::with_capacity(data.len() + 16);
    out.extend_from_slice(&len);
    out.extend_from_slice(&masked_crc(&len).to_le_bytes());
    out.extend_from_slice(data);
    out.extend_from_slice(&masked_crc(data).to_le_bytes());
    out
}

/// The records' data in `bytes`, and whether they end where `bytes` ends (false: a
/// short or damaged record ends the file, and is not returned).
pub(crate) fn records(bytes: &[u8]) -> (Vec<&[u8]>, bool) {
    let mut out = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let Some(header) = bytes.get(at..at + 12) else {
            return (out, false);
        };
        let (len, len_crc) = header.split_at(8);
        if masked_crc(len).to_le_bytes() != len_crc {
            return (out, false);
        }
        let mut len_bytes = [0u8; 8];
        len_bytes.copy_from_slice(len);
        let Ok(n) = usize::try_from(u64::from_le_bytes(len_bytes)) else {
            return (out, false);
        };
        let start = at + 12;
        let Some(data) = start.checked_add(n).and_then(|end| bytes.get(start..end)) else {
            return (out, false);
        };
        let Some(crc) = bytes.get(start + n..start + n + 4) else {
            return (out, false);
        };
        if masked_crc(data).to_le_bytes() != crc {
            return (out, false);
        }
        out.push(data);
        at = start + n + 4;
    }
    (out, true)
}

fn varint(mut v: u64, out: &mut Vec<u8>) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// A length-delimited field.
fn bytes_field(field: u8, bytes: &[u8], out: &mut Vec<u8>) {
    out.push((field << 3) | 2);
    varint(bytes.len() as u64, out);
    out.extend_from_slice(bytes);
}

pub(crate) fn encode_event(event: &Event) -> Vec<u8> {
    let mut out = Vec::new();
    out.push((1 << 3) | 1);
    out.extend_from_slice(&event.wall_time.to_le_bytes());
    out.push(2 << 3);
    varint(event.step as u64, &mut out);
    if let Some(version) = &event.file_version {
        bytes_field(3, version.as_bytes(), &mut out);
    }
    if !event.values.is_empty() {
        let mut summary = Vec::new();
        for (tag, value) in &event.values {
            let mut v = Vec::with_capacity(tag.len() + 8);
            bytes_field(1, tag.as_bytes(), &mut v);
            v.push((2 << 3) | 5);
            v.extend_from_slice(&value.to_le_bytes());
            bytes_field(1, &v, &mut summary);
        }
        bytes_field(5, &summary, &mut out);
    }
    out
}

/// A protobuf reader over the wire types this format uses.
struct Fields<'a>(&'a [u8]);

/// A field's value.
enum Wire<'a> {
    Varint(u64),
    Fixed64([u8; 8]),
    Bytes(&'a [u8]),
    Fixed32([u8; 4]),
}

impl<'a> Fields<'a> {
    fn varint(&mut self) -> Option<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let (&b, rest) = self.0.split_first()?;
            self.0 = rest;
            v |= u64::from(b & 0x7f) << shift;
            if b < 0x80 {
                return Some(v);
            }
        }
        None
    }

    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (head, rest) = (self.0.get(..n)?, self.0.get(n..)?);
        self.0 = rest;
        Some(head)
    }

    /// The next field, `None` at the end; `Some(None)` for bytes that do not parse.
    fn next_field(&mut self) -> Option<Option<(u64, Wire<'a>)>> {
        if self.0.is_empty() {
            return None;
        }
        let mut field = || -> Option<(u64, Wire<'a>)> {
            let key = self.varint()?;
            let wire = match key & 7 {
                0 => Wire::Varint(self.varint()?),
                1 => Wire::Fixed64(self.take(8)?.try_into().ok()?),
                2 => {
                    let n = usize::try_from(self.varint()?).ok()?;
                    Wire::Bytes(self.take(n)?)
                }
                5 => Wire::Fixed32(self.take(4)?.try_into().ok()?),
                _ => return None,
            };
            Some((key >> 3, wire))
        };
        Some(field())
    }
}

/// Decodes an `Event` (unknown fields skipped); `None` for bytes that do not parse.
pub(crate) fn decode_event(data: &[u8]) -> Option<Event> {
    let mut event = Event {
        wall_time: 0.0,
        step: 0,
        file_version: None,
        values: Vec::new(),
    };
    let mut fields = Fields(data);
    while let Some(field) = fields.next_field() {
        match field? {
            (1, Wire::Fixed64(b)) => event.wall_time = f64::from_le_bytes(b),
            (2, Wire::Varint(v)) => event.step = v as i64,
            (3, Wire::Bytes(b)) => event.file_version = Some(String::from_utf8(b.to_vec()).ok()?),
            (5, Wire::Bytes(summary)) => {
                let mut values = Fields(summary);
                while let Some(value) = values.next_field() {
                    if let (1, Wire::Bytes(value)) = value? {
                        event.values.push(decode_value(value)?);
                    }
                }
            }
            _ => {}
        }
    }
    Some(event)
}

fn decode_value(data: &[u8]) -> Option<(String, f32)> {
    let (mut tag, mut value) = (None, None);
    let mut fields = Fields(data);
    while let Some(field) = fields.next_field() {
        match field? {
            (1, Wire::Bytes(b)) => tag = Some(String::from_utf8(b.to_vec()).ok()?),
            (2, Wire::Fixed32(b)) => value = Some(f32::from_le_bytes(b)),
            _ => {}
        }
    }
    Some((tag?, value?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn line(value: Value) -> Map<String, Value> {
        match value {
            Value::Object(map) => map,
            _ => unreachable!("a JSON object"),
        }
    }

    fn read_dir_events(dir: &Path) -> Vec<Event> {
        let mut events = Vec::new();
        let mut paths: Vec<PathBuf> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        paths.sort();
        for path in paths {
            let bytes = fs::read(&path).unwrap();
            let (records, whole) = records(&bytes);
            assert!(whole, "{} ends in a torn record", path.display());
            events.extend(records.into_iter().map(|r| decode_event(r).unwrap()));
        }
        events
    }

    #[test]
    fn crc32c_is_the_castagnoli_checksum() {
        // The check value of CRC-32C (RFC 3720, B.4).
        assert_eq!(crc32c::crc32c(b"123456789"), 0xe306_9283);
        // The record framing of an empty record, as TensorFlow writes it: length 0
        // masked, and the masked CRC of no bytes.
        let framed = frame(b"");
        assert_eq!(framed.len(), 16);
        assert_eq!(&framed[..8], &[0; 8]);
        assert_eq!(&framed[12..], &masked_crc(b"").to_le_bytes());
        assert_eq!(masked_crc(b""), 0xa282_ead8);
    }

    #[test]
    fn written_records_decode_back_with_tags_values_and_steps() {
        let dir = tempfile::tempdir().unwrap();
        let tb = dir.path().join(TENSORBOARD_DIR);
        let mut writer = EventWriter::create(&tb).unwrap();
        writer
            .write_line(&line(json!({
                "env_steps": 2048, "return_mean": 21.5, "length_mean": null,
                "entropy": 0.69, "alpha": 0.2, "grad_norm": 3.0, "early_stopped": true,
                "env_steps_per_s": 1234.5,
            })))
            .unwrap();
        writer
            .write_line(&line(json!({"env_steps": 4096, "loss": 0.125})))
            .unwrap();
        // A line without values writes no record.
        writer
            .write_line(&line(json!({"env_steps": 5000, "return_mean": null})))
            .unwrap();
        let events = read_dir_events(&tb);
        assert_eq!(events.len(), 3);
        assert_eq!(events[0].file_version.as_deref(), Some("brain.Event:2"));
        assert!(events[0].values.is_empty());
        assert_eq!(events[1].step, 2048);
        assert!(events[1].wall_time > 1.0e9);
        let mut values = events[1].values.clone();
        values.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(
            values,
            vec![
                ("rollout/ep_rew_mean".to_owned(), 21.5),
                ("time/fps".to_owned(), 1234.5),
                ("train/early_stopped".to_owned(), 1.0),
                ("train/ent_coef".to_owned(), 0.2),
                ("train/entropy_loss".to_owned(), -0.69),
                ("train/grad_norm".to_owned(), 3.0),
            ]
        );
        assert_eq!(events[2].step, 4096);
        assert_eq!(events[2].values, vec![("train/loss".to_owned(), 0.125)]);
    }

    #[test]
    fn a_damaged_byte_ends_the_records() {
        let data = encode_event(&Event {
            wall_time: 1.5,
            step: 7,
            file_version: None,
            values: vec![("a".into(), 1.0)],
        });
        let mut bytes = frame(&data);
        bytes.extend_from_slice(&frame(&data));
        assert_eq!(records(&bytes), (vec![&data[..], &data[..]], true));
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        assert_eq!(records(&bytes), (vec![&data[..]], false));
        bytes.truncate(bytes.len() - 3);
        assert!(!records(&bytes).1);
    }

    #[test]
    fn cut_drops_steps_past_the_checkpoint_and_a_torn_tail() {
        let dir = tempfile::tempdir().unwrap();
        let mut writer = EventWriter::create(dir.path()).unwrap();
        for steps in [100, 200, 300] {
            writer
                .write_line(&line(json!({"env_steps": steps, "return_mean": steps})))
                .unwrap();
        }
        let path = writer.path.clone();
        drop(writer);
        let mut file = OpenOptions::new().append(true).open(&path).unwrap();
        file.write_all(&[1, 2, 3]).unwrap();
        cut(dir.path(), 200).unwrap();
        let steps: Vec<i64> = read_dir_events(dir.path()).iter().map(|e| e.step).collect();
        assert_eq!(steps, vec![0, 100, 200]);
        // A resumed run's new file sits beside the old one.
        let mut again = EventWriter::create(dir.path()).unwrap();
        again
            .write_line(&line(json!({"env_steps": 250, "return_mean": 1})))
            .unwrap();
        assert_ne!(again.path, path);
        let steps: Vec<i64> = read_dir_events(dir.path()).iter().map(|e| e.step).collect();
        assert_eq!(steps, vec![0, 100, 200, 0, 250]);
    }
}
