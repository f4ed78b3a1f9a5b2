//! `SyncWorkers`: the request threads of the synchronous stores.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tiercache_runtime::{ErrorKind, SyncWorkers};

fn thread_name() -> String {
    std::thread::current().name().unwrap_or("").to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_concurrent_calls_each_get_their_own_answer_on_the_pool_threads() {
    let w = Arc::new(SyncWorkers::new("sw-test", 2).unwrap());
    let ran = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for i in 0..256u64 {
        let (w, ran) = (Arc::clone(&w), Arc::clone(&ran));
        tasks.push(tokio::spawn(async move {
            w.run(move || {
                ran.fetch_add(1, Ordering::SeqCst);
                Ok((i * 3, thread_name()))
            })
            .await
        }));
    }
    for (i, t) in tasks.into_iter().enumerate() {
        let (v, name) = t.await.unwrap().unwrap();
        assert_eq!(v, i as u64 * 3);
        assert!(name.starts_with("sw-test-"), "ran on {name:?}");
    }
    assert_eq!(ran.load(Ordering::SeqCst), 256);
}

#[tokio::test]
async fn errors_of_the_call_come_back_unchanged() {
    let w = SyncWorkers::new("sw-err", 1).unwrap();
    let e = w
        .run(|| -> tiercache_runtime::Result<()> {
            Err(tiercache_runtime::Error::invalid("bad range"))
        })
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Invalid);
    assert_eq!(e.message, "bad range");
}

#[tokio::test]
async fn zero_threads_runs_inline_on_the_caller() {
    let w = SyncWorkers::new("sw-inline", 0).unwrap();
    let caller = thread_name();
    let name = w.call(thread_name).await.unwrap();
    assert_eq!(name, caller);
}

#[tokio::test]
async fn a_panicking_call_is_an_io_error_and_a_dead_pool_refuses_clearly() {
    let w = SyncWorkers::new("sw-panic", 1).unwrap();
    let e = w
        .call(|| -> u32 { panic!("injected panic in a request thread") })
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Io);
    assert!(e.message.contains("request thread"), "{}", e.message);
    // Its only thread is gone: the next call is refused, not hung.
    let e = w.call(|| 1u32).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Io);
}
