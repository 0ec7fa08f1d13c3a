//! The sandbox's `/etc`, built up from nothing.
//!
//! The host's `/etc` holds what programs need to run (the loader's cache,
//! TLS roots, the time zone, Debian's alternatives) next to what no command
//! of the agent has any business reading: TLS private keys
//! (`/etc/ssl/private`, readable to a daemon run as root, who stays their
//! owner inside), shadow files, sudoers, SSH host keys, service
//! configurations with passwords, the system's git settings. Masking the
//! secrets one by one misses the ones nobody listed, so the sandbox shows
//! an empty `/etc` and binds into it only the entries of [`ETC_ENTRIES`],
//! each with the reason it is there; `passwd` and `group` are synthetic
//! ([`super::probe::synthetic_files`]) and `resolv.conf` is shown only to a
//! run granted network. `docs/sandbox.md` prints the same list.

use std::path::{Path, PathBuf};

/// One entry of the sandbox's `/etc`: a name relative to `/etc` (a trailing
/// `*` matches any rest of the last component: `python3*`) and why
/// programs need it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EtcEntry {
    pub name: &'static str,
    pub why: &'static str,
}

const fn e(name: &'static str, why: &'static str) -> EtcEntry {
    EtcEntry { name, why }
}

/// What the sandbox shows of the host's `/etc`, besides the synthetic
/// `passwd`/`group` and the resolver of a granted run. Everything else
/// under `/etc` is absent.
pub const ETC_ENTRIES: &[EtcEntry] = &[
    e(
        "ld.so.cache",
        "the dynamic loader finds shared libraries through it",
    ),
    e(
        "ld.so.conf",
        "the loader's library path list (read by ldconfig -p, some build tools)",
    ),
    e("ld.so.conf.d", "included by ld.so.conf"),
    e(
        "nsswitch.conf",
        "glibc looks up users, groups and hosts as it says",
    ),
    e("hosts", "`localhost` resolves to the loopback"),
    e("host.conf", "resolver options read by glibc"),
    e("gai.conf", "address order of getaddrinfo"),
    e("protocols", "getprotobyname (Python's socket, curl)"),
    e("services", "getservbyname: port names such as `https`"),
    e("networks", "getnetbyname, read by `ip` and `route`"),
    e(
        "ssl/certs",
        "TLS root certificates and the CA bundle (`ca-certificates.crt`)",
    ),
    e(
        "ssl/openssl.cnf",
        "OpenSSL's configuration, loaded by every program using it",
    ),
    e("pki/tls/certs", "the CA bundle on Fedora and RHEL"),
    e(
        "pki/tls/openssl.cnf",
        "OpenSSL's configuration on Fedora and RHEL",
    ),
    e(
        "pki/ca-trust/extracted",
        "the trust store the Fedora bundle links into",
    ),
    e(
        "ca-certificates",
        "Debian's extra trust anchors, linked from ssl/certs",
    ),
    e("localtime", "the time zone (`date`, logs, test timestamps)"),
    e("timezone", "the time zone's name (Debian)"),
    e(
        "os-release",
        "what the system is: build scripts and installers read it",
    ),
    e("lsb-release", "the same for older tools"),
    e(
        "debian_version",
        "the Debian release, read by some build scripts",
    ),
    e(
        "alternatives",
        "Debian's links behind `python`, `editor`, `awk`, `java`, `cc`",
    ),
    e("locale.alias", "locale names glibc accepts"),
    e("locale.conf", "the system locale (Arch, Fedora)"),
    e("default/locale", "the system locale (Debian)"),
    e("shells", "the list of login shells some tools check"),
    e("profile", "read by login shells (`bash -l`)"),
    e("bash.bashrc", "read by interactive bash"),
    e("inputrc", "readline settings"),
    e("terminfo", "local terminal descriptions"),
    e(
        "mime.types",
        "file types by extension (Python's mimetypes, web servers in tests)",
    ),
    e("magic", "`file`'s local rules"),
    e("magic.mime", "`file --mime`'s local rules"),
    e("mtab", "the mount table link `df` and `mount` read"),
    e(
        "python3*",
        "Debian's sitecustomize.py, which /usr/lib/python3.* links to",
    ),
    e(
        "perl",
        "Debian's Net::Config, which /usr/share/perl links to",
    ),
    e(
        "java-*",
        "the JDK's configuration, which /usr/lib/jvm links to on Debian",
    ),
    e("fonts", "fontconfig (documentation, plot and PDF builds)"),
    e("xml", "XML catalogs (xmllint, docbook)"),
    e("sgml", "SGML catalogs"),
    e("vim", "the system vimrc, for an editor the agent starts"),
    e(
        "ssh/ssh_config",
        "the ssh client's defaults, for git over ssh in a granted run",
    ),
    e("ssh/ssh_config.d", "included by ssh_config"),
];

/// Entries of the host's `/etc` the sandbox never shows, with the reason:
/// named so that the documentation and the tests can say why a
/// well-known file is missing (everything not in [`ETC_ENTRIES`] is
/// absent anyway).
pub const ETC_LEFT_OUT: &[EtcEntry] = &[
    e("ssl/private", "TLS private keys: readable to a daemon run as root"),
    e("shadow", "password hashes"),
    e("sudoers", "who may become root"),
    e("ssh/ssh_host_*_key", "the machine's SSH identity"),
    e("gitconfig", "system git settings (hooks, credential helpers, fsmonitor): git inside gets the person's identity only"),
    e("pip.conf", "an installer's settings may hold a registry's credentials"),
    e("npmrc", "an installer's settings may hold a registry's token"),
    e("machine-id", "an identifier of the machine, needed by nothing a command runs"),
];

/// One mount of the sandbox's `/etc`, probed on the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EtcItem {
    /// A file or directory bound read-only: host source, sandbox path.
    Bind { source: PathBuf, dest: PathBuf },
    /// A symlink recreated as it is (`localtime -> /usr/share/zoneinfo/…`,
    /// `os-release -> ../usr/lib/os-release`).
    Symlink { dest: PathBuf, target: String },
}

/// The entries of [`ETC_ENTRIES`] that exist under `etc` (the host's
/// `/etc`, or a test tree), as mounts at `/etc/...`, sorted by path.
pub fn probe_etc(etc: &Path) -> Vec<EtcItem> {
    let mut out = Vec::new();
    for entry in ETC_ENTRIES {
        for rel in expand(etc, entry.name) {
            let source = etc.join(&rel);
            let dest = Path::new("/etc").join(&rel);
            let Ok(meta) = std::fs::symlink_metadata(&source) else {
                continue;
            };
            if meta.file_type().is_symlink() {
                if let Some(target) = std::fs::read_link(&source)
                    .ok()
                    .and_then(|t| t.to_str().map(str::to_string))
                {
                    out.push(EtcItem::Symlink { dest, target });
                }
            } else if meta.is_file() || meta.is_dir() {
                out.push(EtcItem::Bind { source, dest });
            }
        }
    }
    out.sort_by(|a, b| a.dest().cmp(b.dest()));
    out.dedup();
    out
}

impl EtcItem {
    /// Where it appears in the sandbox.
    pub fn dest(&self) -> &Path {
        match self {
            EtcItem::Bind { dest, .. } | EtcItem::Symlink { dest, .. } => dest,
        }
    }
}

/// The names under `etc` that `pattern` stands for: itself, or with a
/// trailing `*` every entry of its directory starting with the rest.
fn expand(etc: &Path, pattern: &str) -> Vec<PathBuf> {
    let Some(prefix) = pattern.strip_suffix('*') else {
        return vec![PathBuf::from(pattern)];
    };
    let (dir, start) = match prefix.rsplit_once('/') {
        Some((d, s)) => (etc.join(d), s),
        None => (etc.to_path_buf(), prefix),
    };
    let Ok(rd) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let base = prefix.rsplit_once('/').map(|(d, _)| d);
    let mut names: Vec<PathBuf> = rd
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .filter(|n| n.starts_with(start))
        .map(|n| match base {
            Some(b) => Path::new(b).join(n),
            None => PathBuf::from(n),
        })
        .collect();
    names.sort();
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_listed_entries_are_shown_and_secrets_never() {
        let etc = tempfile::tempdir().unwrap();
        let p = etc.path();
        for d in [
            "ssl/certs",
            "ssl/private",
            "alternatives",
            "python3.11",
            "apt",
        ] {
            std::fs::create_dir_all(p.join(d)).unwrap();
        }
        for f in [
            "ssl/certs/ca-certificates.crt",
            "ssl/private/x.key",
            "shadow",
            "gitconfig",
            "hosts",
            "ld.so.cache",
            "nsswitch.conf",
            "apt/sources.list",
        ] {
            std::fs::write(p.join(f), "x").unwrap();
        }
        std::os::unix::fs::symlink("/usr/share/zoneinfo/Etc/UTC", p.join("localtime")).unwrap();
        let items = probe_etc(p);
        let dests: Vec<&Path> = items.iter().map(EtcItem::dest).collect();
        assert_eq!(
            dests,
            [
                "/etc/alternatives",
                "/etc/hosts",
                "/etc/ld.so.cache",
                "/etc/localtime",
                "/etc/nsswitch.conf",
                "/etc/python3.11",
                "/etc/ssl/certs",
            ]
            .map(Path::new)
        );
        assert!(items.contains(&EtcItem::Symlink {
            dest: "/etc/localtime".into(),
            target: "/usr/share/zoneinfo/Etc/UTC".into()
        }));
        assert!(items.contains(&EtcItem::Bind {
            source: p.join("ssl/certs"),
            dest: "/etc/ssl/certs".into()
        }));
    }

    #[test]
    fn nothing_listed_is_also_left_out() {
        for out in ETC_LEFT_OUT {
            assert!(
                !ETC_ENTRIES
                    .iter()
                    .any(|e| out.name.starts_with(e.name.trim_end_matches('*'))
                        || e.name.starts_with(out.name)),
                "{} is both shown and left out",
                out.name
            );
        }
    }
}
