//! Replicas of one machine share one compile cache (`[runtime]
//! cache_dir`): when they compile the same component at once (started or
//! reloaded together), one compiles it and the others read it from the
//! cache, instead of each compiling it.

use std::sync::{Arc, Barrier};

use leasehold_host::runtime::{EngineConfig, GuestLimits, Runtime, compile_lock};
use leasehold_tests::guest;

/// Two engines (as two replicas have) on one cache folder compile one
/// component at the same moment, while a third party holds the compile
/// lock: once it is released, one compiles and stores, the other reads.
#[test]
fn replicas_compiling_one_component_together_compile_it_once() {
    let dir = std::env::temp_dir().join(format!(
        "leasehold-compile-cache-{}-{}",
        std::process::id(),
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    ));
    let config = EngineConfig {
        max_guests: 2,
        memory_bytes: leasehold_host::limits::GUEST_MEMORY_BYTES,
        pooling: false,
        cache_dir: Some(dir.clone()),
    };
    let bytes = Arc::new(std::fs::read(guest("scheduler")).expect("the scheduler component"));
    let replicas: Vec<Runtime> = (0..2)
        .map(|_| Runtime::new(&config).expect("an engine"))
        .collect();

    // Both compiles start together, and only once this lock is released.
    let held = compile_lock::hold(&dir, &bytes).expect("take the compile lock");
    let start = Arc::new(Barrier::new(3));
    let compiles: Vec<_> = replicas
        .iter()
        .cloned()
        .enumerate()
        .map(|(i, runtime)| {
            let bytes = Arc::clone(&bytes);
            let start = Arc::clone(&start);
            std::thread::spawn(move || {
                start.wait();
                runtime
                    .compile(
                        &format!("scheduler-{i}"),
                        "scheduler.wasm",
                        &bytes,
                        GuestLimits::default(),
                        Vec::new(),
                    )
                    .map(|_| ())
                    .map_err(|e| e.to_string())
            })
        })
        .collect();
    start.wait();
    drop(held);
    for compile in compiles {
        compile
            .join()
            .expect("a compile thread")
            .expect("it compiles");
    }

    let (hits, misses) = replicas.iter().fold((0, 0), |(hits, misses), r| {
        let stats = r.cache_stats().expect("a cache is configured");
        (hits + stats.hits, misses + stats.misses)
    });
    assert_eq!(
        (misses, hits),
        (1, 1),
        "one replica compiled and stored the component, the other read it"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
