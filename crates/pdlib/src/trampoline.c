/* packetdrill's fcntl and ioctl callbacks are C-variadic (packetdrill.h):
 *   int (*fcntl)(void *userdata, int fd, int cmd, ...);
 *   int (*ioctl)(void *userdata, int fd, unsigned long request, ...);
 * Both take at most one argument after the command (an int, a long or a pointer, all
 * passed in a 64-bit register or stack slot on Linux's ABIs), read here as a long, as
 * glibc's fcntl reads it, and handed to the Rust functions with a fixed signature. */
#include <stdarg.h>

long ustack_pd_fcntl_fixed(void *userdata, int fd, int cmd, long arg);
long ustack_pd_ioctl_fixed(void *userdata, int fd, unsigned long request, long arg);

int ustack_pd_fcntl(void *userdata, int fd, int cmd, ...)
{
	va_list ap;
	long arg;

	va_start(ap, cmd);
	arg = va_arg(ap, long);
	va_end(ap);
	return (int)ustack_pd_fcntl_fixed(userdata, fd, cmd, arg);
}

int ustack_pd_ioctl(void *userdata, int fd, unsigned long request, ...)
{
	va_list ap;
	long arg;

	va_start(ap, request);
	arg = va_arg(ap, long);
	va_end(ap);
	return (int)ustack_pd_ioctl_fixed(userdata, fd, request, arg);
}
