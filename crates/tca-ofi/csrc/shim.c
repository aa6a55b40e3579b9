/*
 * tca-ofi shim: each function forwards to the libfabric static inline of the same name
 * (without the tca_ prefix). See shim.h.
 */
#include "shim.h"

/* src/lib.rs spells these as u64::MAX; make sure the headers agree. */
_Static_assert(FI_ADDR_UNSPEC == UINT64_MAX, "FI_ADDR_UNSPEC is not (uint64_t)-1");
_Static_assert(FI_ADDR_NOTAVAIL == UINT64_MAX, "FI_ADDR_NOTAVAIL is not (uint64_t)-1");

uint32_t tca_fi_version(void) { return fi_version(); }
const char *tca_fi_strerror(int errnum) { return fi_strerror(errnum); }

int tca_fi_getinfo(uint32_t version, const char *node, const char *service, uint64_t flags,
		   const struct fi_info *hints, struct fi_info **info)
{
	return fi_getinfo(version, node, service, flags, hints, info);
}
void tca_fi_freeinfo(struct fi_info *info) { fi_freeinfo(info); }
struct fi_info *tca_fi_dupinfo(const struct fi_info *info) { return fi_dupinfo(info); }
struct fi_info *tca_fi_allocinfo(void) { return fi_allocinfo(); }

struct fid *tca_fi_fabric_fid(struct fid_fabric *fabric) { return &fabric->fid; }
struct fid *tca_fi_domain_fid(struct fid_domain *domain) { return &domain->fid; }
struct fid *tca_fi_ep_fid(struct fid_ep *ep) { return &ep->fid; }
struct fid *tca_fi_cq_fid(struct fid_cq *cq) { return &cq->fid; }
struct fid *tca_fi_av_fid(struct fid_av *av) { return &av->fid; }
struct fid *tca_fi_mr_fid(struct fid_mr *mr) { return &mr->fid; }

int tca_fi_fabric(struct fi_fabric_attr *attr, struct fid_fabric **fabric, void *context)
{
	return fi_fabric(attr, fabric, context);
}
int tca_fi_domain(struct fid_fabric *fabric, struct fi_info *info, struct fid_domain **domain,
		  void *context)
{
	return fi_domain(fabric, info, domain, context);
}
int tca_fi_endpoint(struct fid_domain *domain, struct fi_info *info, struct fid_ep **ep,
		    void *context)
{
	return fi_endpoint(domain, info, ep, context);
}
int tca_fi_cq_open(struct fid_domain *domain, struct fi_cq_attr *attr, struct fid_cq **cq,
		   void *context)
{
	return fi_cq_open(domain, attr, cq, context);
}
int tca_fi_av_open(struct fid_domain *domain, struct fi_av_attr *attr, struct fid_av **av,
		   void *context)
{
	return fi_av_open(domain, attr, av, context);
}
int tca_fi_ep_bind(struct fid_ep *ep, struct fid *bfid, uint64_t flags)
{
	return fi_ep_bind(ep, bfid, flags);
}
int tca_fi_enable(struct fid_ep *ep) { return fi_enable(ep); }
int tca_fi_getname(struct fid *fid, void *addr, size_t *addrlen)
{
	return fi_getname(fid, addr, addrlen);
}
int tca_fi_av_insert(struct fid_av *av, const void *addr, size_t count, fi_addr_t *fi_addr,
		     uint64_t flags, void *context)
{
	return fi_av_insert(av, addr, count, fi_addr, flags, context);
}
int tca_fi_close(struct fid *fid) { return fi_close(fid); }

int tca_fi_mr_reg(struct fid_domain *domain, const void *buf, size_t len, uint64_t access,
		  uint64_t offset, uint64_t requested_key, uint64_t flags, struct fid_mr **mr,
		  void *context)
{
	return fi_mr_reg(domain, buf, len, access, offset, requested_key, flags, mr, context);
}
uint64_t tca_fi_mr_key(struct fid_mr *mr) { return fi_mr_key(mr); }
void *tca_fi_mr_desc(struct fid_mr *mr) { return fi_mr_desc(mr); }
int tca_fi_mr_bind(struct fid_mr *mr, struct fid *bfid, uint64_t flags)
{
	return fi_mr_bind(mr, bfid, flags);
}
int tca_fi_mr_enable(struct fid_mr *mr) { return fi_mr_enable(mr); }

ssize_t tca_fi_write(struct fid_ep *ep, const void *buf, size_t len, void *desc,
		     fi_addr_t dest_addr, uint64_t addr, uint64_t key, void *context)
{
	return fi_write(ep, buf, len, desc, dest_addr, addr, key, context);
}
ssize_t tca_fi_writedata(struct fid_ep *ep, const void *buf, size_t len, void *desc,
			 uint64_t data, fi_addr_t dest_addr, uint64_t addr, uint64_t key,
			 void *context)
{
	return fi_writedata(ep, buf, len, desc, data, dest_addr, addr, key, context);
}
ssize_t tca_fi_inject_write(struct fid_ep *ep, const void *buf, size_t len, fi_addr_t dest_addr,
			    uint64_t addr, uint64_t key)
{
	return fi_inject_write(ep, buf, len, dest_addr, addr, key);
}
ssize_t tca_fi_inject_writedata(struct fid_ep *ep, const void *buf, size_t len, uint64_t data,
				fi_addr_t dest_addr, uint64_t addr, uint64_t key)
{
	return fi_inject_writedata(ep, buf, len, data, dest_addr, addr, key);
}
ssize_t tca_fi_send(struct fid_ep *ep, const void *buf, size_t len, void *desc,
		    fi_addr_t dest_addr, void *context)
{
	return fi_send(ep, buf, len, desc, dest_addr, context);
}
ssize_t tca_fi_inject(struct fid_ep *ep, const void *buf, size_t len, fi_addr_t dest_addr)
{
	return fi_inject(ep, buf, len, dest_addr);
}
ssize_t tca_fi_recv(struct fid_ep *ep, void *buf, size_t len, void *desc, fi_addr_t src_addr,
		    void *context)
{
	return fi_recv(ep, buf, len, desc, src_addr, context);
}

ssize_t tca_fi_cq_read(struct fid_cq *cq, void *buf, size_t count)
{
	return fi_cq_read(cq, buf, count);
}
ssize_t tca_fi_cq_readerr(struct fid_cq *cq, struct fi_cq_err_entry *buf, uint64_t flags)
{
	return fi_cq_readerr(cq, buf, flags);
}
const char *tca_fi_cq_strerror(struct fid_cq *cq, int prov_errno, const void *err_data, char *buf,
			       size_t len)
{
	return fi_cq_strerror(cq, prov_errno, err_data, buf, len);
}
int tca_fi_cq_getwait_fd(struct fid_cq *cq, int *fd)
{
	return fi_control(&cq->fid, FI_GETWAIT, fd);
}
int tca_fi_trywait(struct fid_fabric *fabric, struct fid **fids, int count)
{
	return fi_trywait(fabric, fids, count);
}
