//! File names that mark a project's secrets: one rule, read by the gates
//! (`gates::protected_paths`, which asks before such a file is read) and by
//! the sandbox surface's walk (`sandbox::surface::redactable_files`, whose
//! files' values are redacted from tool output). Kept here, below both, so
//! the two never disagree about what a secret file is.

use std::sync::OnceLock;

use regex::Regex;

/// Source and document extensions: `secrets.rs` or `token.md` are code and
/// prose about secrets, not secrets.
const CODE_EXTENSIONS: &[&str] = &[
    "rs", "py", "js", "ts", "go", "c", "h", "cc", "cpp", "hpp", "java", "kt", "rb", "md", "org",
    "el", "txt.in", "html", "css", "sh", "lisp", "scm", "hs", "ml", "swift", "php", "cs", "lua",
    "metta", "rst", "tex", "snap",
];

fn secret_name_regex() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| {
        #[allow(clippy::expect_used)]
        Regex::new(r"(?i)(?:^|[._-])(?:secrets?|tokens?|credentials?|passwords?)(?:[._-]|$)")
            .expect("built-in secret-name pattern is valid")
    })
}

/// A private key's usual name (`id_rsa`, `*.key`, `*_rsa`, `*.ppk`; the
/// caller excludes `*.pub`).
pub fn is_private_key_name(name: &str) -> bool {
    let key_names = [
        "id_rsa",
        "id_dsa",
        "id_ecdsa",
        "id_ed25519",
        "id_ecdsa_sk",
        "id_ed25519_sk",
        "identity",
    ];
    (key_names.contains(&name) || (name.starts_with("id_") && name.contains('*')))
        || name.ends_with(".key")
        || name.ends_with("_rsa")
        || name.ends_with(".ppk")
}

/// A dotenv file: `.env`, `.env.*` but the example kinds (`.env.example`,
/// `.sample`, `.template`, `.dist`).
pub fn is_dotenv_name(name: &str) -> bool {
    name == ".env"
        || (name.starts_with(".env.")
            && !matches!(
                name,
                ".env.example" | ".env.sample" | ".env.template" | ".env.dist"
            ))
}

/// An environment file with secrets: a dotenv file ([`is_dotenv_name`])
/// or `.envrc`.
pub fn is_env_file_name(name: &str) -> bool {
    is_dotenv_name(name) || name == ".envrc"
}

/// Named like a secret (`secrets.yaml`, `api-token`, `credentials.json`,
/// `db_password`), unless the extension says it is code or prose.
pub fn is_named_like_a_secret(name: &str) -> bool {
    let ext = name.rsplit_once('.').map(|(_, e)| e).unwrap_or("");
    secret_name_regex().is_match(name) && !CODE_EXTENSIONS.contains(&ext)
}

/// Whether a file with this name is one of the project's secrets: a
/// private key (not `*.pub`), an environment file, or a file named like a
/// secret. By the name alone, as a directory listing gives it.
pub fn is_project_secret_name(name: &str) -> bool {
    (is_private_key_name(name) && !name.ends_with(".pub"))
        || is_env_file_name(name)
        || is_named_like_a_secret(name)
}

/// A file that keeps credentials among other settings, whose secret values
/// (not the file) are redacted from tool output: Compose files (their
/// `environment`), npm/PyPI/pip settings, netrc, pgpass, stored git
/// credentials. Reading one is not asked about; the values it holds are
/// taken out of what the model reads.
pub fn holds_secret_values_name(name: &str) -> bool {
    let compose = (name.starts_with("docker-compose") || name.starts_with("compose"))
        && (name.ends_with(".yml") || name.ends_with(".yaml"));
    compose
        || matches!(
            name,
            ".npmrc"
                | ".pypirc"
                | "pip.conf"
                | ".netrc"
                | "_netrc"
                | ".pgpass"
                | ".git-credentials"
                | ".dockercfg"
                | ".yarnrc.yml"
        )
}
