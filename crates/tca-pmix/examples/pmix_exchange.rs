//! Every process of a job puts a key, meets the others at a fence, and prints what each of
//! them put: `mpirun -n 3 target/debug/examples/pmix_exchange` (feature `link`). The
//! binding's test runs it.

#[cfg(feature = "link")]
fn main() {
    let c = match tca_pmix::Client::init() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("pmix_exchange: {e}");
            std::process::exit(2);
        }
    };
    let run = || -> Result<String, tca_pmix::Error> {
        c.put("tca-test", &format!("from-{}-of-{}", c.rank(), c.size()))?;
        c.fence(std::time::Duration::from_secs(30))?;
        let all: Result<Vec<String>, _> = (0..c.size())
            .map(|r| c.get(r, "tca-test", std::time::Duration::from_secs(30)))
            .collect();
        Ok(all?.join(","))
    };
    match run() {
        Ok(all) => println!("rank {} nspace {} saw {all}", c.rank(), c.nspace()),
        Err(e) => {
            eprintln!("pmix_exchange: rank {}: {e}", c.rank());
            std::process::exit(1);
        }
    }
}

#[cfg(not(feature = "link"))]
fn main() {
    eprintln!("pmix_exchange needs the `link` feature");
    std::process::exit(2);
}
