/*
 * tca-ofi shim: real (exported) symbols for the libfabric calls tca-ofi uses.
 *
 * Almost the whole libfabric API is `static inline` functions in <rdma/fi_*.h> that
 * jump through the ops tables of the fid objects, so there are no symbols for Rust to
 * link against. Each `tca_fi_*` function below wraps exactly one libfabric call (or one
 * field access) and adds no policy: same arguments, same return value.
 */
#ifndef TCA_OFI_SHIM_H
#define TCA_OFI_SHIM_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

/* Values that are macros bindgen cannot evaluate (function-like, or aliases of errno.h). */
enum tca_fi_const {
	/* The API version this shim was compiled against, FI_VERSION(major, minor). */
	TCA_FI_API_VERSION = FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION),
	/* Positive FI_E* codes; libfabric calls return their negatives. */
	TCA_FI_EAGAIN = FI_EAGAIN,
	TCA_FI_EAVAIL = FI_EAVAIL,
	TCA_FI_ENODATA = FI_ENODATA,
	TCA_FI_EINVAL = FI_EINVAL,
	TCA_FI_EMSGSIZE = FI_EMSGSIZE,
	TCA_FI_ETOOSMALL = FI_ETOOSMALL,
	TCA_FI_ENOSYS = FI_ENOSYS,
};

/* Library and info */
uint32_t tca_fi_version(void);
const char *tca_fi_strerror(int errnum);
int tca_fi_getinfo(uint32_t version, const char *node, const char *service, uint64_t flags,
		   const struct fi_info *hints, struct fi_info **info);
void tca_fi_freeinfo(struct fi_info *info);
struct fi_info *tca_fi_dupinfo(const struct fi_info *info);
struct fi_info *tca_fi_allocinfo(void);

/* The `struct fid` header embedded first in every object (for bind, close, trywait). */
struct fid *tca_fi_fabric_fid(struct fid_fabric *fabric);
struct fid *tca_fi_domain_fid(struct fid_domain *domain);
struct fid *tca_fi_ep_fid(struct fid_ep *ep);
struct fid *tca_fi_cq_fid(struct fid_cq *cq);
struct fid *tca_fi_av_fid(struct fid_av *av);
struct fid *tca_fi_mr_fid(struct fid_mr *mr);

/* Object creation and setup */
int tca_fi_fabric(struct fi_fabric_attr *attr, struct fid_fabric **fabric, void *context);
int tca_fi_domain(struct fid_fabric *fabric, struct fi_info *info, struct fid_domain **domain,
		  void *context);
int tca_fi_endpoint(struct fid_domain *domain, struct fi_info *info, struct fid_ep **ep,
		    void *context);
int tca_fi_cq_open(struct fid_domain *domain, struct fi_cq_attr *attr, struct fid_cq **cq,
		   void *context);
int tca_fi_av_open(struct fid_domain *domain, struct fi_av_attr *attr, struct fid_av **av,
		   void *context);
int tca_fi_ep_bind(struct fid_ep *ep, struct fid *bfid, uint64_t flags);
int tca_fi_enable(struct fid_ep *ep);
int tca_fi_getname(struct fid *fid, void *addr, size_t *addrlen);
int tca_fi_av_insert(struct fid_av *av, const void *addr, size_t count, fi_addr_t *fi_addr,
		     uint64_t flags, void *context);
int tca_fi_close(struct fid *fid);

/* Memory registration */
int tca_fi_mr_reg(struct fid_domain *domain, const void *buf, size_t len, uint64_t access,
		  uint64_t offset, uint64_t requested_key, uint64_t flags, struct fid_mr **mr,
		  void *context);
uint64_t tca_fi_mr_key(struct fid_mr *mr);
void *tca_fi_mr_desc(struct fid_mr *mr);
int tca_fi_mr_bind(struct fid_mr *mr, struct fid *bfid, uint64_t flags);
int tca_fi_mr_enable(struct fid_mr *mr);

/* Data transfer */
ssize_t tca_fi_write(struct fid_ep *ep, const void *buf, size_t len, void *desc,
		     fi_addr_t dest_addr, uint64_t addr, uint64_t key, void *context);
ssize_t tca_fi_writedata(struct fid_ep *ep, const void *buf, size_t len, void *desc,
			 uint64_t data, fi_addr_t dest_addr, uint64_t addr, uint64_t key,
			 void *context);
ssize_t tca_fi_inject_write(struct fid_ep *ep, const void *buf, size_t len, fi_addr_t dest_addr,
			    uint64_t addr, uint64_t key);
ssize_t tca_fi_inject_writedata(struct fid_ep *ep, const void *buf, size_t len, uint64_t data,
				fi_addr_t dest_addr, uint64_t addr, uint64_t key);
ssize_t tca_fi_send(struct fid_ep *ep, const void *buf, size_t len, void *desc,
		    fi_addr_t dest_addr, void *context);
ssize_t tca_fi_inject(struct fid_ep *ep, const void *buf, size_t len, fi_addr_t dest_addr);
ssize_t tca_fi_recv(struct fid_ep *ep, void *buf, size_t len, void *desc, fi_addr_t src_addr,
		    void *context);

/* Completion queue */
ssize_t tca_fi_cq_read(struct fid_cq *cq, void *buf, size_t count);
ssize_t tca_fi_cq_readerr(struct fid_cq *cq, struct fi_cq_err_entry *buf, uint64_t flags);
const char *tca_fi_cq_strerror(struct fid_cq *cq, int prov_errno, const void *err_data, char *buf,
			       size_t len);
/* fi_control(&cq->fid, FI_GETWAIT, fd): the fd of a CQ opened with FI_WAIT_FD. */
int tca_fi_cq_getwait_fd(struct fid_cq *cq, int *fd);
int tca_fi_trywait(struct fid_fabric *fabric, struct fid **fids, int count);

#endif /* TCA_OFI_SHIM_H */
