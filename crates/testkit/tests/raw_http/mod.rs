//! A minimal HTTP/1.1 client that keeps the chunk framing visible, to check
//! what the fake puts on the wire.

use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// What the next read of a body found.
#[derive(Debug, PartialEq, Eq)]
pub enum Chunk {
    Data(Vec<u8>),
    /// The terminating zero-length chunk: the server ended the body cleanly.
    End,
    /// The connection closed before the terminating chunk.
    Dropped,
}

pub struct Response {
    pub status: u16,
    /// The status line and header lines as sent, CRLFs included.
    pub head: String,
    reader: BufReader<TcpStream>,
}

/// `GET target` (path and query) from `url` (`http://127.0.0.1:PORT`).
pub async fn get(url: &str, target: &str, token: Option<&str>) -> Response {
    let addr = url.strip_prefix("http://").expect("the fake serves plain http");
    let mut stream = TcpStream::connect(addr).await.expect("the fake is listening");
    let auth = token.map(|t| format!("Authorization: Bearer {t}\r\n")).unwrap_or_default();
    let request = format!("GET {target} HTTP/1.1\r\nHost: {addr}\r\nAccept: application/json\r\n{auth}\r\n");
    stream.write_all(request.as_bytes()).await.expect("sending a request");
    let mut reader = BufReader::new(stream);
    let mut head = String::new();
    loop {
        let before = head.len();
        reader.read_line(&mut head).await.expect("reading the response head");
        if head.len() == before || head[before..] == *"\r\n" {
            break;
        }
    }
    let status = head.split(' ').nth(1).and_then(|s| s.parse().ok()).expect("a status line");
    Response { status, head, reader }
}

impl Response {
    /// A header's value, by case-insensitive name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().skip(1).find_map(|line| {
            let (key, value) = line.split_once(':')?;
            key.eq_ignore_ascii_case(name).then(|| value.trim())
        })
    }

    pub fn is_chunked(&self) -> bool {
        self.header("Transfer-Encoding") == Some("chunked")
    }

    /// The next chunk of a chunked body, waiting at most `within`.
    pub async fn next_chunk(&mut self, within: Duration) -> Chunk {
        tokio::time::timeout(within, self.read_chunk()).await.expect("a chunk in time")
    }

    async fn read_chunk(&mut self) -> Chunk {
        let mut size_line = String::new();
        match self.reader.read_line(&mut size_line).await {
            Ok(0) | Err(_) => return Chunk::Dropped,
            Ok(_) => {}
        }
        let Ok(size) = usize::from_str_radix(size_line.trim(), 16) else { return Chunk::Dropped };
        let mut data = vec![0; size + 2];
        if self.reader.read_exact(&mut data).await.is_err() {
            return Chunk::Dropped;
        }
        data.truncate(size);
        if size == 0 { Chunk::End } else { Chunk::Data(data) }
    }

    /// Every chunk until the end of a chunked body, and how it ended.
    pub async fn chunks(&mut self, within: Duration) -> (Vec<Vec<u8>>, Chunk) {
        let mut chunks = Vec::new();
        loop {
            match self.next_chunk(within).await {
                Chunk::Data(data) => chunks.push(data),
                end => return (chunks, end),
            }
        }
    }

    /// The whole body, chunked or with a Content-Length.
    pub async fn body(mut self) -> Vec<u8> {
        if self.is_chunked() {
            let (chunks, end) = self.chunks(Duration::from_secs(2)).await;
            assert_eq!(end, Chunk::End, "the body ends cleanly");
            return chunks.concat();
        }
        let length = self.header("Content-Length").and_then(|l| l.parse().ok()).expect("a Content-Length");
        let mut body = vec![0; length];
        self.reader.read_exact(&mut body).await.expect("reading the body");
        body
    }
}
