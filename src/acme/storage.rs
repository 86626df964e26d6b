//! Keeps the ACME account and the issued certificates on disk, one folder per CA
//! (`STORAGE/<directory host and path>/`), so a restart reuses them and staging and
//! production never mix: `account.json` (the account's key and URL), and per name
//! `certs/NAME.pem` (the chain) and `certs/NAME.key.pem` (its key).
//!
//! Folders are created 0700 and files written 0600: they hold private keys. A file is
//! written beside its final name and renamed over it, so a crash leaves the old file or
//! the new one, never half of one. Reading says whether a file is missing or broken;
//! the manager logs a broken one and orders anew.

use std::fs;
use std::io::{self, Write as _};
use std::path::{Path, PathBuf};

use instant_acme::AccountCredentials;

/// Why a stored file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    #[error("cannot read {path}: {source}")]
    Read { path: PathBuf, source: io::Error },
    #[error("cannot write {path}: {source}")]
    Write { path: PathBuf, source: io::Error },
    #[error("{path} is not account credentials: {message}")]
    Account { path: PathBuf, message: String },
}

/// One CA's folder.
#[derive(Debug, Clone)]
pub struct Storage {
    dir: PathBuf,
}

/// A certificate as stored: its PEM chain and PEM key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredCertificate {
    pub chain_pem: String,
    pub key_pem: String,
}

impl Storage {
    /// The folder for the CA at `directory` under `root`, created (with `root`) if
    /// missing.
    pub fn open(root: &Path, directory: &str) -> Result<Storage, StorageError> {
        let dir = root.join(folder_name(directory));
        create_private_dir(&dir.join("certs"))
            .map_err(|source| StorageError::Write { path: dir.clone(), source })?;
        Ok(Storage { dir })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn account_path(&self) -> PathBuf {
        self.dir.join("account.json")
    }

    fn chain_path(&self, name: &str) -> PathBuf {
        self.dir.join("certs").join(format!("{}.pem", file_stem(name)))
    }

    fn key_path(&self, name: &str) -> PathBuf {
        self.dir.join("certs").join(format!("{}.key.pem", file_stem(name)))
    }

    /// The stored account, if there is one.
    pub fn load_account(&self) -> Result<Option<AccountCredentials>, StorageError> {
        let path = self.account_path();
        let Some(text) = read_optional(&path)? else { return Ok(None) };
        serde_json::from_str(&text)
            .map(Some)
            .map_err(|e| StorageError::Account { path, message: e.to_string() })
    }

    pub fn save_account(&self, credentials: &AccountCredentials) -> Result<(), StorageError> {
        let path = self.account_path();
        let text = serde_json::to_string_pretty(credentials)
            .map_err(|e| StorageError::Account { path: path.clone(), message: e.to_string() })?;
        write_private(&path, text.as_bytes())
    }

    /// The stored certificate for `name`, if both its files are there.
    pub fn load_certificate(&self, name: &str) -> Result<Option<StoredCertificate>, StorageError> {
        let chain = read_optional(&self.chain_path(name))?;
        let key = read_optional(&self.key_path(name))?;
        Ok(chain.zip(key).map(|(chain_pem, key_pem)| StoredCertificate { chain_pem, key_pem }))
    }

    /// Stores the certificate for `name`: the key first, so that a chain on disk
    /// always has its key beside it.
    pub fn save_certificate(
        &self,
        name: &str,
        certificate: &StoredCertificate,
    ) -> Result<(), StorageError> {
        write_private(&self.key_path(name), certificate.key_pem.as_bytes())?;
        write_private(&self.chain_path(name), certificate.chain_pem.as_bytes())
    }
}

/// The folder name for a directory URL: its host, port and path, with every byte
/// other than a letter, digit, `.` or `-` turned into `_`
/// (`acme-staging-v02.api.letsencrypt.org_directory`).
pub fn folder_name(directory: &str) -> String {
    let rest = directory.split_once("://").map_or(directory, |(_, rest)| rest);
    let sanitized: String = rest
        .trim_end_matches('/')
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '.' || c == '-' { c } else { '_' })
        .collect();
    // "." and ".." would name the storage root or its parent.
    if sanitized.trim_matches('.').is_empty() {
        format!("_{sanitized}")
    } else {
        sanitized
    }
}

/// A name as a file name: names are validated DNS names, so this only guards against
/// a path in one.
fn file_stem(name: &str) -> String {
    name.chars().map(|c| if c == '/' || c == '\\' { '_' } else { c }).collect()
}

fn read_optional(path: &Path) -> Result<Option<String>, StorageError> {
    match fs::read_to_string(path) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(StorageError::Read { path: path.to_path_buf(), source }),
    }
}

/// Creates `dir` and its missing parents, each 0700; an existing `dir` is set to 0700.
fn create_private_dir(dir: &Path) -> io::Result<()> {
    let mut builder = fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        // The CA folder and its certs folder, not the operator's storage root.
        for d in [Some(dir), dir.parent()].into_iter().flatten() {
            fs::set_permissions(d, fs::Permissions::from_mode(0o700))?;
        }
    }
    Ok(())
}

/// Writes `bytes` to `path` with mode 0600, through a temporary file renamed over it.
fn write_private(path: &Path, bytes: &[u8]) -> Result<(), StorageError> {
    let error = |source| StorageError::Write { path: path.to_path_buf(), source };
    let mut temporary = path.as_os_str().to_owned();
    temporary.push(".tmp");
    let temporary = PathBuf::from(temporary);
    // Left over from a crash: its mode may not be ours.
    let _ = fs::remove_file(&temporary);
    let mut options = fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options.open(&temporary).map_err(error)?;
    file.write_all(bytes).and_then(|()| file.sync_all()).map_err(error)?;
    drop(file);
    fs::rename(&temporary, path).map_err(error)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(test: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("holdfast-acme-{test}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn one_folder_per_ca() {
        assert_eq!(
            folder_name("https://acme-staging-v02.api.letsencrypt.org/directory"),
            "acme-staging-v02.api.letsencrypt.org_directory"
        );
        assert_eq!(folder_name("https://127.0.0.1:14000/dir/"), "127.0.0.1_14000_dir");
        assert_eq!(folder_name("https://../"), "_..");
        assert_ne!(
            folder_name(super::super::settings::LETS_ENCRYPT),
            folder_name(super::super::settings::LETS_ENCRYPT_STAGING)
        );
    }

    #[test]
    fn certificates_round_trip_with_private_modes() {
        let root = scratch("round-trip");
        let storage = Storage::open(&root, "https://ca.example/dir").unwrap();
        assert_eq!(storage.load_certificate("a.example").unwrap(), None);
        let cert = StoredCertificate { chain_pem: "chain".into(), key_pem: "key".into() };
        storage.save_certificate("a.example", &cert).unwrap();
        assert_eq!(storage.load_certificate("a.example").unwrap(), Some(cert));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode(storage.dir()), 0o700);
            assert_eq!(mode(&storage.dir().join("certs")), 0o700);
            assert_eq!(mode(&storage.key_path("a.example")), 0o600);
            assert_eq!(mode(&storage.chain_path("a.example")), 0o600);
        }
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn broken_account_file_is_an_error_not_a_panic() {
        let root = scratch("broken-account");
        let storage = Storage::open(&root, "https://ca.example/dir").unwrap();
        assert!(storage.load_account().unwrap().is_none());
        fs::write(storage.account_path(), "{ not json").unwrap();
        let Err(error) = storage.load_account() else { panic!("broken credentials were read") };
        assert!(error.to_string().contains("account.json"), "{error}");
        fs::remove_dir_all(&root).unwrap();
    }
}
