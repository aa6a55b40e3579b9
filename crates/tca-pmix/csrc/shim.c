/* The PMIx calls tca's start-up makes, as exported functions over integers and C strings
 * (PMIx's values, procs and infos are structs and macros the Rust side need not know).
 * No policy here: each function is one PMIx call, or the few a value needs, and returns
 * PMIx's status. */
#include <pmix.h>
#include <stdint.h>
#include <string.h>

/* This process, as PMIx_Init filled it in. */
static pmix_proc_t me;

int tca_pmix_init(uint32_t *rank, uint32_t *size) {
    pmix_status_t rc = PMIx_Init(&me, NULL, 0);
    if (rc != PMIX_SUCCESS) return rc;
    *rank = me.rank;
    pmix_proc_t job;
    PMIX_LOAD_PROCID(&job, me.nspace, PMIX_RANK_WILDCARD);
    pmix_value_t *v = NULL;
    rc = PMIx_Get(&job, PMIX_JOB_SIZE, NULL, 0, &v);
    if (rc != PMIX_SUCCESS) {
        PMIx_Finalize(NULL, 0);
        return rc;
    }
    if (v->type != PMIX_UINT32) {
        PMIX_VALUE_RELEASE(v);
        PMIx_Finalize(NULL, 0);
        return PMIX_ERR_TYPE_MISMATCH;
    }
    *size = v->data.uint32;
    PMIX_VALUE_RELEASE(v);
    return PMIX_SUCCESS;
}

/* Copies the namespace (the job's name) into buf of len bytes, NUL-terminated. */
void tca_pmix_nspace(char *buf, size_t len) {
    if (len == 0) return;
    strncpy(buf, me.nspace, len - 1);
    buf[len - 1] = '\0';
}

int tca_pmix_put(const char *key, const char *value) {
    pmix_value_t v;
    PMIX_VALUE_CONSTRUCT(&v);
    v.type = PMIX_STRING;
    v.data.string = (char *)value;
    /* PMIx_Put copies the value; the string stays ours (not released through v). */
    return PMIx_Put(PMIX_GLOBAL, key, &v);
}

/* Commits this process's puts and waits until every process of the job has done the same,
 * collecting the data so that later gets are local; gives up after timeout_s seconds
 * (PMIX_ERR_TIMEOUT) when it is positive. */
int tca_pmix_fence(int timeout_s) {
    pmix_status_t rc = PMIx_Commit();
    if (rc != PMIX_SUCCESS) return rc;
    pmix_proc_t job;
    PMIX_LOAD_PROCID(&job, me.nspace, PMIX_RANK_WILDCARD);
    pmix_info_t info[2];
    bool collect = true;
    size_t n = 1;
    PMIX_INFO_CONSTRUCT(&info[0]);
    PMIX_INFO_CONSTRUCT(&info[1]);
    PMIX_INFO_LOAD(&info[0], PMIX_COLLECT_DATA, &collect, PMIX_BOOL);
    if (timeout_s > 0) {
        PMIX_INFO_LOAD(&info[1], PMIX_TIMEOUT, &timeout_s, PMIX_INT);
        n = 2;
    }
    rc = PMIx_Fence(&job, 1, info, n);
    PMIX_INFO_DESTRUCT(&info[0]);
    PMIX_INFO_DESTRUCT(&info[1]);
    return rc;
}

/* The string `key` that process `rank` of this job put, copied into buf (len bytes,
 * NUL-terminated); gives up after timeout_s seconds (PMIX_ERR_TIMEOUT) when it is positive
 * (a server may hold a get for a key nobody put). Returns PMIX_ERR_TYPE_MISMATCH for a
 * value that is not a string and PMIX_ERR_BAD_PARAM if it does not fit. */
int tca_pmix_get(uint32_t rank, const char *key, int timeout_s, char *buf, size_t len) {
    pmix_proc_t p;
    PMIX_LOAD_PROCID(&p, me.nspace, rank);
    pmix_info_t info;
    PMIX_INFO_CONSTRUCT(&info);
    size_t n = 0;
    if (timeout_s > 0) {
        PMIX_INFO_LOAD(&info, PMIX_TIMEOUT, &timeout_s, PMIX_INT);
        n = 1;
    }
    pmix_value_t *v = NULL;
    pmix_status_t rc = PMIx_Get(&p, key, n ? &info : NULL, n, &v);
    PMIX_INFO_DESTRUCT(&info);
    if (rc != PMIX_SUCCESS) return rc;
    if (v->type != PMIX_STRING || v->data.string == NULL) {
        rc = PMIX_ERR_TYPE_MISMATCH;
    } else if (strlen(v->data.string) >= len) {
        rc = PMIX_ERR_BAD_PARAM;
    } else {
        strcpy(buf, v->data.string);
    }
    PMIX_VALUE_RELEASE(v);
    return rc;
}

int tca_pmix_finalize(void) {
    return PMIx_Finalize(NULL, 0);
}

int tca_pmix_err_timeout(void) {
    return PMIX_ERR_TIMEOUT;
}

size_t tca_pmix_max_keylen(void) {
    return PMIX_MAX_KEYLEN;
}

const char *tca_pmix_error(int rc) {
    return PMIx_Error_string(rc);
}
