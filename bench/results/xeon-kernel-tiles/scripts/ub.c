#include KSRC
#include <stdio.h>
static double now(void){struct timespec t; clock_gettime(CLOCK_MONOTONIC,&t); return t.tv_sec+t.tv_nsec*1e-9;}
int main(int argc, char**argv){
  long kc=atol(argv[3]), npan=atol(argv[1]), reps=atol(argv[2]);
  T *a=aligned_alloc(64, MR*kc*4), *b=aligned_alloc(64, npan*NR*kc*4), *c=aligned_alloc(64, MR*npan*NR*4*64);
  for(long i=0;i<MR*kc;i++)a[i]=1e-3f*(i%7); for(long i=0;i<npan*NR*kc;i++)b[i]=1e-3f*(i%5);
  long ldc = npan*NR; X xs={0};
  double best=1e9;
  for(int r=0;r<5;r++){ double t0=now();
  for(long q=0;q<reps;q++) for(long j=0;j<npan;j++)
    ukr_p(kc,a,1,MR,b+j*NR*kc,NR,c+j*NR,ldc,1,MR,NR,1,1,1.0f,0,0,&xs);
  double t=now()-t0; if(t<best)best=t;}
  printf("npan %ld: %.1f GF/s (c %g)\n", npan, 2.0*MR*NR*kc*npan*reps/best/1e9, c[5]);
}
