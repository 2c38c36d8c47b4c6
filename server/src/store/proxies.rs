//! Upstream proxies: their rows, the password sealed (see `secrets.rs`).

use super::*;

/// A proxy row. `password_sealed` is what `Sealer::seal` made, never the password.
#[derive(Debug, Clone, PartialEq)]
pub struct ProxyRecord {
    pub id: String,
    pub url: String,
    pub username: String,
    pub password_sealed: Option<String>,
    pub direct_hosts: Vec<String>,
    pub tenants: Vec<String>,
}

impl Store {
    /// Creates or replaces a proxy; returns whether it was new.
    pub async fn put_proxy(&self, p: &ProxyRecord, now_ms: i64) -> Result<bool, StoreError> {
        self.noted(
            async {
                let direct = serde_json::to_string(&p.direct_hosts).unwrap_or_else(|_| "[]".into());
                let tenants = serde_json::to_string(&p.tenants).unwrap_or_else(|_| "[]".into());
                let existed = self.proxy(&p.id).await?.is_some();
                with_pool!(self, pool => sqlx::query(
                    "INSERT INTO proxies (id, url, username, password_sealed, direct_hosts, tenants, updated_at_ms) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (id) DO UPDATE SET url = excluded.url, \
                     username = excluded.username, password_sealed = excluded.password_sealed, \
                     direct_hosts = excluded.direct_hosts, tenants = excluded.tenants, updated_at_ms = excluded.updated_at_ms",
                )
                .bind(&p.id)
                .bind(&p.url)
                .bind(&p.username)
                .bind(p.password_sealed.as_deref())
                .bind(&direct)
                .bind(&tenants)
                .bind(now_ms)
                .execute(pool)
                .await?
                .rows_affected());
                Ok(!existed)
            }
            .await,
        )
    }

    /// Every proxy, by id.
    pub async fn proxies(&self) -> Result<Vec<ProxyRecord>, StoreError> {
        with_pool!(self, pool => sqlx::query("SELECT * FROM proxies ORDER BY id")
            .fetch_all(pool)
            .await?
            .iter()
            .map(|r| Cols(r).proxy())
            .collect())
    }

    /// The proxy, if it exists.
    pub async fn proxy(&self, id: &str) -> Result<Option<ProxyRecord>, StoreError> {
        with_pool!(self, pool => sqlx::query("SELECT * FROM proxies WHERE id = $1")
            .bind(id)
            .fetch_optional(pool)
            .await?
            .map(|r| Cols(&r).proxy())
            .transpose())
    }

    /// Deletes a proxy; returns whether it existed.
    pub async fn delete_proxy(&self, id: &str) -> Result<bool, StoreError> {
        self.noted(async {
            let done = with_pool!(self, pool => sqlx::query("DELETE FROM proxies WHERE id = $1").bind(id).execute(pool).await?.rows_affected());
            Ok(done > 0)
        }
        .await)
    }
}

impl<'r, R> Cols<'r, R>
where
    R: Row,
    &'r str: sqlx::ColumnIndex<R>,
    String: Decode<'r, R::Database> + Type<R::Database>,
    i64: Decode<'r, R::Database> + Type<R::Database>,
    bool: Decode<'r, R::Database> + Type<R::Database>,
{
    fn proxy(&self) -> Result<ProxyRecord, StoreError> {
        let id: String = self.get("id")?;
        let list = |column: &'r str| -> Result<Vec<String>, StoreError> {
            let json: String = self.get(column)?;
            serde_json::from_str(&json).map_err(|e| StoreError::Corrupt(format!("proxy {id} {column}: {e}")))
        };
        Ok(ProxyRecord {
            url: self.get("url")?,
            username: self.get("username")?,
            password_sealed: self.get("password_sealed")?,
            direct_hosts: list("direct_hosts")?,
            tenants: list("tenants")?,
            id: id.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn proxies_are_put_replaced_listed_and_deleted_on_every_backend() {
        let dir = tempfile::tempdir().unwrap();
        for url in crate::store::tests::backends(dir.path()).await {
            let store = Store::open(&url).await.unwrap();
            // A run on a shared database starts from no proxy of this test's.
            let _ = store.delete_proxy("eu-1").await;
            let eu = ProxyRecord {
                id: "eu-1".into(),
                url: "http://proxy.test:3128".into(),
                username: "ci".into(),
                password_sealed: Some("v1:sealed".into()),
                direct_hosts: vec!["*.internal.test".into()],
                tenants: vec!["team-a".into()],
            };
            assert!(store.put_proxy(&eu, 1).await.unwrap(), "new");
            let moved = ProxyRecord { url: "socks5://proxy.test:1080".into(), password_sealed: None, ..eu.clone() };
            assert!(!store.put_proxy(&moved, 2).await.unwrap(), "replaced");
            assert_eq!(store.proxy("eu-1").await.unwrap(), Some(moved.clone()));
            assert!(store.proxies().await.unwrap().contains(&moved));
            assert!(store.delete_proxy("eu-1").await.unwrap());
            assert!(!store.delete_proxy("eu-1").await.unwrap(), "deleted once");
            assert_eq!(store.proxy("eu-1").await.unwrap(), None);
            store.close().await;
        }
    }
}
