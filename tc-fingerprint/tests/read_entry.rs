//! `read_entry` is how both of tc's on-disk caches read: anything at an
//! entry's name that is not a regular file within the limit is refused at
//! once (a FIFO would block a plain read forever).

use tc_fingerprint::{read_entry, Entry};

#[test]
fn only_a_bounded_regular_file_is_read() {
    let dir = std::env::temp_dir().join(format!("tc-read-entry-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("entry");
    std::fs::write(&file, b"12345").unwrap();
    assert_eq!(read_entry(&file, 5), Entry::Read(b"12345".to_vec()));
    assert_eq!(read_entry(&file, 4), Entry::Refused);
    assert_eq!(read_entry(&dir.join("absent"), 5), Entry::Absent);
    assert_eq!(read_entry(&dir, 5), Entry::Refused);
    #[cfg(unix)]
    {
        let link = dir.join("link");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        assert_eq!(read_entry(&link, 5), Entry::Refused);
        let fifo = dir.join("fifo");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        if made.is_ok_and(|s| s.success()) {
            // Without O_NONBLOCK this open would wait for a writer forever.
            assert_eq!(read_entry(&fifo, 5), Entry::Refused);
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
