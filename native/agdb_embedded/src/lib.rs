//! agdb embedded in Python, for storebench's `agdb-embedded` store.
//!
//! One home for the query language: the store builds the same JSON queries it
//! sends to agdb_server's `/exec` and `/exec_mut` (a list of agdb `QueryType`s,
//! serde's JSON form) and gets the same JSON results back, so only the
//! transport differs from the server store. A list runs in one transaction,
//! and a query may use an earlier one's result as `{"Alias": ":N"}`: the
//! server's own rules, copied from agdb_server 0.16 (`db_pool/user_db.rs`,
//! Apache-2.0) so the two stores answer alike, errors included.
//!
//! The GIL is released for everything past reading the request bytes:
//! parsing, the transaction, and writing the result JSON. Reads share the
//! database (a read lock, as the server's), writes take it alone. At most
//! `workers` calls run in agdb at once (the others wait, asleep): what the
//! server's and the study's tokio runtime do with one worker thread per core.
//! Without that bound, 200 reader threads all run agdb at once on 2 cores.

use agdb::DbAny;
use agdb::DbAnyTransaction;
use agdb::DbAnyTransactionMut;
use agdb::DbError;
use agdb::QueryConditionData;
use agdb::QueryId;
use agdb::QueryIds;
use agdb::QueryResult;
use agdb::QueryType;
use agdb::SearchQuery;
use agdb::SyncMode;
use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use std::sync::Condvar;
use std::sync::Mutex;
use std::sync::RwLock;
use std::sync::RwLockReadGuard;
use std::sync::RwLockWriteGuard;

create_exception!(storebench_agdb, QueryError, PyException, "agdb refused or failed a query.");

/// Every failure, as a message (the server answers with the same text).
type Failure = String;

fn db_failure(e: DbError) -> Failure {
    e.description
}

/// A counting semaphore: at most `permits` holders at once (0: no bound).
struct Gate {
    permits: usize,
    held: Mutex<usize>,
    freed: Condvar,
}

struct Permit<'a>(&'a Gate);

impl Gate {
    fn new(permits: usize) -> Self {
        Self {
            permits,
            held: Mutex::new(0),
            freed: Condvar::new(),
        }
    }

    fn enter(&self) -> Permit<'_> {
        if self.permits > 0 {
            let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
            while *held >= self.permits {
                held = self.freed.wait(held).unwrap_or_else(|e| e.into_inner());
            }
            *held += 1;
        }
        Permit(self)
    }
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        if self.0.permits > 0 {
            let mut held = self.0.held.lock().unwrap_or_else(|e| e.into_inner());
            *held -= 1;
            self.0.freed.notify_one();
        }
    }
}

/// One agdb database: `memory`, `file` or `mapped` (agdb's `DbAny` kinds).
#[pyclass(frozen)]
struct Database {
    db: RwLock<Option<DbAny>>,
    kind: String,
    gate: Gate,
}

impl Database {
    fn read(&self) -> Result<RwLockReadGuard<'_, Option<DbAny>>, Failure> {
        self.db.read().map_err(|_| "agdb: the database lock is poisoned".to_string())
    }

    fn write(&self) -> Result<RwLockWriteGuard<'_, Option<DbAny>>, Failure> {
        self.db.write().map_err(|_| "agdb: the database lock is poisoned".to_string())
    }
}

fn closed() -> Failure {
    "agdb: the database is closed".to_string()
}

fn parse(queries: &[u8]) -> Result<Vec<QueryType>, Failure> {
    serde_json::from_slice(queries).map_err(|e| format!("agdb: bad queries: {e}"))
}

fn dump(results: &[QueryResult]) -> Result<Vec<u8>, Failure> {
    serde_json::to_vec(results).map_err(|e| format!("agdb: cannot write results: {e}"))
}

fn to_py(py: Python<'_>, out: Result<Vec<u8>, Failure>) -> PyResult<Py<PyBytes>> {
    match out {
        Ok(bytes) => Ok(PyBytes::new(py, &bytes).unbind()),
        Err(message) => Err(QueryError::new_err(message)),
    }
}

#[pymethods]
impl Database {
    /// Opens (or creates) the database at `path`; `memory` keeps nothing on disk.
    #[new]
    #[pyo3(signature = (kind, path, sync_mode = None, workers = 0))]
    fn new(
        py: Python<'_>,
        kind: &str,
        path: &str,
        sync_mode: Option<&str>,
        workers: usize,
    ) -> PyResult<Self> {
        let mode = match sync_mode {
            None | Some("none") => SyncMode::None,
            Some("commit") => SyncMode::Commit,
            Some(other) => {
                return Err(PyValueError::new_err(format!("unknown sync_mode {other:?}")));
            }
        };
        let open = match kind {
            "memory" => DbAny::new_memory,
            "file" => DbAny::new_file,
            "mapped" => DbAny::new_mapped,
            other => {
                return Err(PyValueError::new_err(format!("unknown db_type {other:?}")));
            }
        };
        let opened = py.allow_threads(|| open(path));
        let mut db = opened.map_err(|e| QueryError::new_err(e.description))?;
        if sync_mode.is_some() {
            db.set_sync_mode(mode);
        }
        Ok(Self {
            db: RwLock::new(Some(db)),
            kind: kind.to_string(),
            gate: Gate::new(workers),
        })
    }

    /// Read-only queries (JSON) in one read transaction; their results (JSON).
    fn exec(&self, py: Python<'_>, queries: &[u8]) -> PyResult<Py<PyBytes>> {
        let out = py.allow_threads(|| {
            let _permit = self.gate.enter();
            let mut queries = parse(queries)?;
            let guard = self.read()?;
            let db = guard.as_ref().ok_or_else(closed)?;
            let results = db.transaction(|t| {
                let mut results = vec![];
                for q in queries.iter_mut() {
                    let result = t_exec(t, q, &results)?;
                    results.push(result);
                }
                Ok::<_, Failure>(results)
            })?;
            drop(guard);
            dump(&results)
        });
        to_py(py, out)
    }

    /// Queries (JSON) in one write transaction: all apply or none.
    fn exec_mut(&self, py: Python<'_>, queries: &[u8]) -> PyResult<Py<PyBytes>> {
        let out = py.allow_threads(|| {
            let _permit = self.gate.enter();
            let queries = parse(queries)?;
            let mut guard = self.write()?;
            let db = guard.as_mut().ok_or_else(closed)?;
            let results = db.transaction_mut(|t| {
                let mut results = vec![];
                for q in queries {
                    let result = t_exec_mut(t, q, &results)?;
                    results.push(result);
                }
                Ok::<_, TxFailure>(results)
            });
            drop(guard);
            dump(&results.map_err(|e| e.0)?)
        });
        to_py(py, out)
    }

    /// agdb's `optimize_storage` (defragments), then `shrink_to_fit` if asked.
    #[pyo3(signature = (shrink_to_fit = false))]
    fn optimize(&self, py: Python<'_>, shrink_to_fit: bool) -> PyResult<()> {
        py.allow_threads(|| {
            let mut guard = self.write()?;
            let db = guard.as_mut().ok_or_else(closed)?;
            db.optimize_storage().map_err(db_failure)?;
            if shrink_to_fit {
                db.shrink_to_fit().map_err(db_failure)?;
            }
            Ok(())
        })
        .map_err(|message: Failure| QueryError::new_err(message))
    }

    /// The database's size in bytes, as agdb reports it (what the server's
    /// `/db/list` shows).
    fn size(&self, py: Python<'_>) -> PyResult<u64> {
        py.allow_threads(|| {
            let guard = self.read()?;
            Ok(guard.as_ref().ok_or_else(closed)?.size())
        })
        .map_err(|message: Failure| QueryError::new_err(message))
    }

    #[getter]
    fn kind(&self) -> &str {
        &self.kind
    }

    #[getter]
    fn workers(&self) -> usize {
        self.gate.permits
    }

    /// Flushes and lets the files go (agdb does that when the database is dropped).
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        py.allow_threads(|| {
            let db = self.write()?.take();
            drop(db);
            Ok(())
        })
        .map_err(|message: Failure| QueryError::new_err(message))
    }
}

/// A failure inside a write transaction (agdb rolls back on `Err`; it needs
/// the error type to be made from its own).
struct TxFailure(Failure);

impl From<DbError> for TxFailure {
    fn from(e: DbError) -> Self {
        TxFailure(e.description)
    }
}

impl From<Failure> for TxFailure {
    fn from(message: Failure) -> Self {
        TxFailure(message)
    }
}

/// Replaces the `{"Alias": ":N"}` references of a query by the ids of the
/// N-th earlier result (the server's rule), for every kind of query.
fn inject(q: &mut QueryType, results: &[QueryResult]) -> Result<(), Failure> {
    match q {
        QueryType::Search(q) => inject_results_search(q, results),
        QueryType::SelectAliases(q) => inject_results(&mut q.0, results),
        QueryType::SelectKeys(q) => inject_results(&mut q.0, results),
        QueryType::SelectKeyCount(q) => inject_results(&mut q.0, results),
        QueryType::SelectValues(q) => inject_results(&mut q.ids, results),
        QueryType::InsertAlias(q) => inject_results(&mut q.ids, results),
        QueryType::InsertEdges(q) => {
            inject_results(&mut q.ids, results)?;
            inject_results(&mut q.from, results)?;
            inject_results(&mut q.to, results)
        }
        QueryType::InsertNodes(q) => inject_results(&mut q.ids, results),
        QueryType::InsertValues(q) => inject_results(&mut q.ids, results),
        QueryType::Remove(q) => inject_results(&mut q.0, results),
        QueryType::RemoveValues(q) => inject_results(&mut q.0.ids, results),
        QueryType::SelectAllAliases(_)
        | QueryType::SelectEdgeCount(_)
        | QueryType::SelectIndexes(_)
        | QueryType::SelectNodeCount(_)
        | QueryType::InsertIndex(_)
        | QueryType::RemoveAliases(_)
        | QueryType::RemoveIndex(_) => Ok(()),
    }
}

/// Runs a read query on a transaction of either kind; `$other` are the arms
/// for the rest (mutable queries: run on a write transaction, refused on a
/// read one). A macro, not a function: agdb's two transaction types share no
/// trait for `exec`.
macro_rules! exec_read_or {
    ($t:expr, $q:expr, { $($other:tt)* }) => {
        match $q {
            QueryType::Search(q) => $t.exec(&*q),
            QueryType::SelectAliases(q) => $t.exec(&*q),
            QueryType::SelectAllAliases(q) => $t.exec(&*q),
            QueryType::SelectEdgeCount(q) => $t.exec(&*q),
            QueryType::SelectIndexes(q) => $t.exec(&*q),
            QueryType::SelectKeys(q) => $t.exec(&*q),
            QueryType::SelectKeyCount(q) => $t.exec(&*q),
            QueryType::SelectNodeCount(q) => $t.exec(&*q),
            QueryType::SelectValues(q) => $t.exec(&*q),
            $($other)*
        }
    };
}

fn t_exec(
    t: &DbAnyTransaction,
    q: &mut QueryType,
    results: &[QueryResult],
) -> Result<QueryResult, Failure> {
    inject(q, results)?;
    exec_read_or!(t, q, {
        _ => Err(DbError::query(
            agdb::DbErrorType::NotAllowed,
            "mutable query not allowed",
        )),
    })
    .map_err(db_failure)
}

fn t_exec_mut(
    t: &mut DbAnyTransactionMut,
    mut q: QueryType,
    results: &[QueryResult],
) -> Result<QueryResult, Failure> {
    inject(&mut q, results)?;
    exec_read_or!(t, &q, {
        QueryType::InsertAlias(q) => t.exec_mut(q),
        QueryType::InsertEdges(q) => t.exec_mut(q),
        QueryType::InsertNodes(q) => t.exec_mut(q),
        QueryType::InsertValues(q) => t.exec_mut(q),
        QueryType::Remove(q) => t.exec_mut(q),
        QueryType::InsertIndex(q) => t.exec_mut(q),
        QueryType::RemoveAliases(q) => t.exec_mut(q),
        QueryType::RemoveIndex(q) => t.exec_mut(q),
        QueryType::RemoveValues(q) => t.exec_mut(q),
    })
    .map_err(db_failure)
}

fn id_or_result(id: QueryId, results: &[QueryResult]) -> Result<QueryId, Failure> {
    if let QueryId::Alias(alias) = &id
        && let Some(index) = alias.strip_prefix(':')
        && let Ok(index) = index.parse::<usize>()
    {
        return Ok(QueryId::Id(
            results
                .get(index)
                .ok_or_else(|| {
                    format!("Results index out of bounds '{index}' (> {})", results.len())
                })?
                .elements
                .first()
                .ok_or_else(|| "No element found in the result".to_string())?
                .id,
        ));
    }
    Ok(id)
}

fn inject_results(ids: &mut QueryIds, results: &[QueryResult]) -> Result<(), Failure> {
    match ids {
        QueryIds::Ids(ids) => inject_results_ids(ids, results),
        QueryIds::Search(search) => inject_results_search(search, results),
    }
}

fn inject_results_search(search: &mut SearchQuery, results: &[QueryResult]) -> Result<(), Failure> {
    search.origin = id_or_result(search.origin.clone(), results)?;
    search.destination = id_or_result(search.destination.clone(), results)?;
    for c in &mut search.conditions {
        if let QueryConditionData::Ids(ids) = &mut c.data {
            inject_results_ids(ids, results)?;
        }
    }
    Ok(())
}

fn inject_results_ids(ids: &mut Vec<QueryId>, results: &[QueryResult]) -> Result<(), Failure> {
    for i in (0..ids.len()).rev() {
        if let QueryId::Alias(alias) = &ids[i]
            && let Some(index) = alias.strip_prefix(':')
            && let Ok(index) = index.parse::<usize>()
        {
            let result_ids = results
                .get(index)
                .ok_or_else(|| {
                    format!("Results index out of bounds '{index}' (> {})", results.len())
                })?
                .ids()
                .into_iter()
                .map(QueryId::Id)
                .collect::<Vec<QueryId>>();
            ids.splice(i..i + 1, result_ids);
        }
    }
    Ok(())
}

/// The agdb version this module was built with.
const AGDB_VERSION: &str = env!("STOREBENCH_AGDB_VERSION");

#[pymodule]
fn storebench_agdb(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Database>()?;
    m.add("QueryError", m.py().get_type::<QueryError>())?;
    m.add("AGDB_VERSION", AGDB_VERSION)?;
    Ok(())
}
