//! Helpers shared by the CLI's integration tests.

// Each test file compiles this module and uses only some of it.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// A filesystem on a loop device, unmounted and detached on drop.
pub struct LoopFs {
    pub mount: PathBuf,
    pub device: String,
}

impl Drop for LoopFs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.mount).status();
        let _ = Command::new("losetup").args(["-d", &self.device]).status();
    }
}

fn have(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

/// Makes a `size_mib` image in `dir`, attaches it with `sector` bytes per
/// sector, formats it with `mkfs` and mounts it. `None` (with the reason
/// printed) where that is not possible here.
pub fn loop_fs(dir: &Path, mkfs: &str, size_mib: u64, sector: u32) -> Option<LoopFs> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 || !have("losetup") || !have(mkfs) {
        eprintln!("skipped: needs root, losetup and {mkfs}");
        return None;
    }
    let image = dir.join(format!("{mkfs}.img"));
    let f = std::fs::File::create(&image).expect("image");
    f.set_len(size_mib << 20).expect("size image");
    let out = Command::new("losetup")
        .args(["--find", "--show", "--sector-size", &sector.to_string()])
        .arg(&image)
        .output()
        .expect("losetup");
    if !out.status.success() {
        eprintln!("skipped: losetup: {}", String::from_utf8_lossy(&out.stderr));
        return None;
    }
    let device = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let mount = dir.join(format!("{mkfs}.mnt"));
    std::fs::create_dir(&mount).expect("mount point");
    let fs = LoopFs { mount, device };
    let made = Command::new(mkfs)
        .args(["-q", &fs.device])
        .output()
        .expect("mkfs");
    assert!(
        made.status.success(),
        "{mkfs}: {}",
        String::from_utf8_lossy(&made.stderr)
    );
    let mounted = Command::new("mount")
        .arg(&fs.device)
        .arg(&fs.mount)
        .status()
        .expect("mount");
    assert!(mounted.success(), "mount {}", fs.device);
    Some(fs)
}

/// A database in `dir` (4 MiB cache) holding `n` keys `key000000`…, each put
/// by a durable transaction of its own.
pub fn database_with_commits(dir: &Path, n: u32) -> directkv::Database {
    let db = directkv::Database::open(
        dir,
        directkv::Options {
            cache_bytes: 4 << 20,
            ..directkv::Options::default()
        },
    )
    .expect("open");
    for i in 0..n {
        let mut w = db.begin_write().expect("begin");
        w.put(format!("key{i:06}").as_bytes(), &[7u8; 100])
            .expect("put");
        w.commit().expect("commit");
    }
    db
}

/// `directkv bench ARGS --dir DIR --json`: whether it succeeded, the JSON
/// lines it printed, and its stderr.
pub fn bench_json(dir: &Path, args: &[&str]) -> (bool, Vec<serde_json::Value>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_directkv"))
        .arg("bench")
        .args(args)
        .arg("--dir")
        .arg(dir)
        .arg("--json")
        .output()
        .expect("run directkv bench");
    let lines = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).expect("each line is JSON"))
        .collect();
    (
        out.status.success(),
        lines,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
